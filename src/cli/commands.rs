//! What each command does: open the files, ask the session, hand the report to `render`.
//! Nothing here computes a finding.

use std::path::{Path, PathBuf};

use crate::analysis::range::Bound;
use crate::budget::{Baseline, Budget};
use crate::export;
use crate::files::Inputs;
use crate::render::{self, Style, Text};
use crate::session::{self, CheckReport, Options, ReportOptions};
use anyhow::Context;

use super::args::*;
use super::exit::{OverBudget, Usage};
use super::output::{self, emit};

impl SummaryCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let s = output::open(&self.file, &self.load, true)?;
        let report = s.summary();
        s.release();
        emit(self.json, &report, |r| r.text(style))
    }
}

impl TopCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let opts = self.at.options(Some(&self.group));
        let s = output::open(&self.file, &self.at.load, false)?;
        let report = s.top(&opts, self.at.point.at, self.limit)?;
        output::finish(s);
        emit(self.json, &report, |r| r.text(style))
    }
}

impl LeaksCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let mut opts = self.analysis.options();
        opts.leaks.warmup = self.leak.warmup;
        opts.leaks.min_bytes = self.leak.min_bytes;
        let s = output::open_any(&self.files, self.rank, &self.analysis.load)?;
        let report = s.leaks(&opts)?;
        output::finish(s);
        emit(self.json, &report, |r| r.text(style))
    }
}

impl CompareCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let opts = self.analysis.options();
        // Both files at once, each freed as soon as its side is computed: the two loads and
        // analyses share the cores.
        let side = |path: &Path| -> anyhow::Result<session::CompareSide> {
            let s = output::open(path, &self.analysis.load, false)?;
            let side = s.compare_side(&opts)?;
            output::warn_disagreements(&s);
            Ok(side)
        };
        if let Some(at) = session::steps_at(&self.a, &self.b, self.at)? {
            let report = session::compare_steps(&self.a, &self.b, &opts, at)?;
            return emit(self.json, &report, |r| r.text(style));
        }
        if let Some(at) = self.at {
            let point = |path: &Path| -> anyhow::Result<session::TopReport> {
                let s = output::open(path, &self.analysis.load, false)?;
                let top = s.holders_at(&opts, at)?;
                output::warn_disagreements(&s);
                Ok(top)
            };
            let (a, b) = rayon::join(|| point(&self.a), || point(&self.b));
            let report = session::compare_at(&a?, &b?, at);
            return emit(self.json, &report, |r| r.text(style));
        }
        let (side_a, side_b) = rayon::join(|| side(&self.a), || side(&self.b));
        let report = session::compare(&side_a?, &side_b?);
        emit(self.json, &report, |r| r.text(style))
    }
}

impl OomCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let opts = self.analysis.options();
        let s = output::open(&self.file, &self.analysis.load, false)?;
        let report = s.oom(&opts)?;
        output::finish(s);
        emit(self.json, &report, |r| r.text(style))
    }
}

impl SegmentsCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let mut opts = Options::default();
        opts.devices = self.point.device;
        let s = output::open(&self.file, &self.load, false)?;
        let report = s.segments(&opts, self.point.at)?;
        output::finish(s);
        emit(self.json, &report, |r| r.text(style))
    }
}

impl TimelineCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let opts = options(self.device, None, None, &self.filters);
        let s = output::open(&self.file, &self.load, false)?;
        let report = s.timeline(&opts, self.drawn.max_allocations)?;
        output::finish(s);
        output::emit_compact(self.json, &report, |r| r.text(style))
    }
}

impl PhasesCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let mut opts = Options::default();
        opts.devices = self.device;
        let s = output::open(&self.file, &self.load, false)?;
        let report = s.phases(&opts)?;
        output::finish(s);
        emit(self.json, &report, |r| r.text(style))
    }
}

impl RanksCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let mut opts = Options::default();
        opts.windows = self.windows.clone();
        let report = session::ranks(&self.dir, &opts)?;
        emit(self.json, &report, |r| r.text(style))
    }
}

impl CheckCmd {
    fn budget(&self) -> anyhow::Result<(Budget, Option<Baseline>)> {
        let text = output::read_text(&self.budget, "budget")?;
        let budget = Budget::parse(&text)
            .map_err(|e| Usage(format!("budget {}: {e}", self.budget.display())))?;
        let baseline = match &self.baseline {
            Some(p) => Some(
                Baseline::from_json(&output::read_text(p, "baseline")?)
                    .map_err(|e| Usage(format!("baseline {}: {e}", p.display())))?,
            ),
            None => None,
        };
        Ok((budget, baseline))
    }

    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let (budget, baseline) = self.budget()?;
        let mut base = Options::default();
        if let Some(r) = &self.roles {
            base.roles = std::sync::Arc::clone(r);
        }
        let opts = session::check_options(&budget, self.windows.clone(), &base);
        let mut checked = Vec::new();
        for f in &self.files {
            let s = output::open(f, &self.load, false)?;
            checked.push(s.check(&budget, baseline.as_ref(), &opts)?);
            output::warn_disagreements(&s);
        }
        let report = CheckReport::new(checked);
        if let Some(j) = &self.junit {
            let mut inputs = Inputs::of(&self.files);
            inputs.add(&self.budget);
            if let Some(b) = &self.baseline {
                inputs.add(b);
            }
            output::file(&inputs, j, render::junit::junit(&report).as_bytes())?;
        }
        emit(self.json, &report, |r| r.text(style))?;
        if report.passed {
            Ok(())
        } else {
            Err(OverBudget.into())
        }
    }
}

impl WindowsCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let opts = options(self.win.device, Some(&self.win), None, &self.filters);
        let s = output::open(&self.file, &self.load, false)?;
        let report = s.windows(&opts)?;
        output::finish(s);
        emit(self.json, &report, |r| r.text(style))
    }
}

impl TreeCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let mut opts = self.at.options(None);
        opts.by = self.by.unwrap_or_default();
        let s = output::open(&self.file, &self.at.load, false)?;
        let report = s.tree(&opts, self.at.point.at)?;
        output::finish(s);
        if self.json {
            output::stdout(&render::json::tree(&report)?)
        } else {
            output::stdout(&render::tree::text(&report, self.min_share, style))
        }
    }
}

impl FlamegraphCmd {
    pub fn run(&self) -> anyhow::Result<()> {
        let opts = self.at.options(None);
        let s = output::open(&self.file, &self.at.load, false)?;
        let report = s.tree(&opts, self.at.point.at)?;
        output::finish(s);
        let lines = render::flamegraph::report_lines(&report);
        if self.folded {
            if report.devices.is_empty() {
                eprintln!("{}", render::idle_line(&report.file, 0, &[]).trim_end());
            }
            let text = render::flamegraph::folded_text(&lines);
            return match &self.output {
                Some(p) => output::file(&Inputs::of([&self.file]), p, text.as_bytes()),
                None => output::stdout(&text),
            };
        }
        let path = self
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from("flamegraph.svg"));
        let svg = render::flamegraph::report_svg(&report, &lines, opts.filters.focus.is_some())
            .context("cannot draw the flame graph")?;
        output::file(&Inputs::of([&self.file]), &path, &svg)?;
        eprintln!(
            "wrote {}",
            render::flamegraph::written(&path, &report, &lines)
        );
        Ok(())
    }
}

impl ReportCmd {
    pub fn run(&self) -> anyhow::Result<()> {
        let opts = self.analysis.options();
        let s = output::open(&self.file, &self.analysis.load, false)?;
        let page = ReportOptions {
            max_allocations: self.drawn.max_allocations,
            ..ReportOptions::default()
        };
        let data = s.report(&opts, &page)?;
        output::finish(s);
        let data_json = serde_json::to_string(&data)?;
        if self.json {
            return output::stdout(&(data_json + "\n"));
        }
        let svgs =
            render::flamegraph::report_page_svgs(&data).context("cannot draw the flame graph")?;
        let html = render::html::page(&data, &data_json, &svgs);
        output::file(&Inputs::of([&self.file]), &self.output, html.as_bytes())?;
        eprintln!(
            "wrote {}",
            render::html::written(&self.output, &data, html.len())
        );
        Ok(())
    }
}

impl ConvertCmd {
    pub fn run(&self) -> anyhow::Result<()> {
        let out: &Path = &self.output;
        let ext = out
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let format = match (self.format, ext.as_str()) {
            (Some(f), _) => f,
            (None, "json") => ConvertFormat::Json,
            (None, "msgpack" | "mpk") => ConvertFormat::Msgpack,
            _ => {
                return Err(Usage(format!(
                    "cannot tell the output format from {}: name it .msgpack (leakscope cache) or .json, or say --format json|msgpack",
                    out.display()
                ))
                .into());
            }
        };
        // Refused before the load, so a mistake costs no time.
        let inputs = Inputs::of([&self.input]);
        inputs.check_output(out)?;
        let s = output::open(&self.input, &self.load, false)?;
        if format == ConvertFormat::Json {
            let mut w = inputs.create(out)?;
            s.write_json(&mut w)?;
            w.commit()?;
        } else {
            output::file(&inputs, out, &s.cache_bytes()?)?;
        }
        eprintln!("wrote {}", out.display());
        Ok(())
    }
}

impl SliceCmd {
    /// The range asked for: --from/--to, or --around P --events N.
    fn range(&self) -> session::SliceOptions {
        let (from, to) = match (self.around, self.events) {
            (Some(p), Some(n)) => {
                let by = |sign: i64| Bound {
                    at: p.at,
                    offset: p.offset.saturating_add(sign * i64::from(n)),
                };
                (by(-1), by(1))
            }
            _ => (self.from, self.to),
        };
        session::SliceOptions::new(from, to, self.device)
    }

    pub fn run(&self) -> anyhow::Result<()> {
        // Refused before the load, so a mistake costs no time.
        let inputs = Inputs::of([&self.file]);
        inputs.check_output(&self.output)?;
        let s = output::open(&self.file, &self.load, false)?;
        let slice = s.slice(&self.range())?;
        let value = crate::convert::to_snapshot_value(&slice.snapshot);
        let mut w = inputs.create(&self.output)?;
        render::pickle::write(&value, &mut w)?;
        let bytes = w.commit()?;
        output::finish(s);
        if self.json {
            return output::stdout(&render::json::pretty(&slice.report)?);
        }
        eprintln!(
            "{}",
            render::slice::written(&self.output, &slice.report, bytes)
        );
        Ok(())
    }
}

impl ExportCmd {
    pub fn run(&self, style: Style) -> anyhow::Result<()> {
        let mut opts = export::ExportOptions::default();
        opts.analysis.windows = self.windows.clone();
        opts.analysis.devices = self.device;
        if let Some(r) = &self.roles {
            opts.analysis.roles = std::sync::Arc::clone(r);
        }
        opts.max_decompressed_bytes = self.load.max_decompressed_bytes;
        if self.pprof.is_some() && self.paths.len() != 1 {
            return Err(Usage(format!(
                "--pprof writes the profile of one file; {} paths were given",
                self.paths.len()
            ))
            .into());
        }
        let mut json = serde_json::Map::new();
        let mut text = String::new();
        if let Some(dir) = &self.parquet {
            let written = exported(export::export_parquet(&self.paths, dir, &opts))?;
            text.push_str(&export::encode::parquet::text(&written, style));
            json.insert("parquet".into(), serde_json::to_value(&written)?);
        }
        if let Some(out) = &self.perfetto {
            let mut p = export::PerfettoOptions::default();
            p.export = opts.clone();
            p.gzip = out.extension().is_some_and(|e| e == "gz");
            p.top_sites = usize::from(self.top_sites);
            let written = exported(export::export_perfetto(&self.paths, out, &p))?;
            text.push_str(&export::text::perfetto(&written));
            json.insert("perfetto".into(), serde_json::to_value(&written)?);
        }
        if let Some(out) = &self.pprof {
            let mut p = export::PprofOptions::default();
            p.export = opts.clone();
            p.at = self.at;
            p.growth = self.growth;
            let written = exported(export::export_pprof(&self.paths[0], out, &p))?;
            text.push_str(&export::text::pprof(&written));
            json.insert("pprof".into(), serde_json::to_value(&written)?);
        }
        if !self.json {
            return output::stdout(&text);
        }
        let value = match json.len() {
            1 => json.into_iter().next().map(|(_, v)| v).unwrap_or_default(),
            _ => serde_json::Value::Object(json),
        };
        output::stdout(&render::json::pretty(&value)?)
    }
}

/// An export's result, its errors as the exit code wants them: the input's fault (exit 2)
/// when nothing could be read or a file cannot be analysed as asked.
fn exported<T>(r: Result<T, export::ExportError>) -> anyhow::Result<T> {
    match r {
        Ok(t) => Ok(t),
        Err(e @ export::ExportError::NothingRead { .. }) => Err(Usage(e.to_string()).into()),
        Err(export::ExportError::Session(e)) => Err(e.into()),
        Err(export::ExportError::Output(e)) => Err(e.into()),
        Err(e) => Err(e.into()),
    }
}
