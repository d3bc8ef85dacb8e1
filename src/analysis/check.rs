//! `leakscope check`: a memory gate for CI. A budget file (TOML) sets limits on growth per
//! window, peak and end memory, forbidden sites and per-site limits; an earlier run's JSON
//! can serve as a baseline with a tolerance. Every limit becomes a case that passes or
//! fails with its numbers.

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::leaks::LeakReport;

/// JSON schema name of [`CheckReport`].
pub const SCHEMA: &str = "leakscope.check/1";

/// A size: an integer of bytes or a string such as `"1.5 MiB"`, `"20 GB"`, `"512"`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// Bytes.
    Bytes(u64),
    /// Text with a unit.
    Text(String),
}

impl Size {
    /// The size in bytes.
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            Size::Bytes(b) => Ok(*b),
            Size::Text(t) => parse_size(t),
        }
    }
}

/// Parses `"1.5 MiB"`, `"20GB"`, `"512 B"`, `"4096"`.
pub fn parse_size(t: &str) -> Result<u64, String> {
    let s = t.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{t}` is not a size (try \"1.5 MiB\")"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" | "k" => 1024.0,
        "mib" | "m" => 1024.0 * 1024.0,
        "gib" | "g" => 1024f64.powi(3),
        "tib" | "t" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(format!(
                "`{t}`: unknown unit `{other}` (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ));
        }
    };
    Ok((n * mult).round() as u64)
}

/// `[leaks]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeakLimits {
    /// The largest `bytes_per_window` any suspect may have.
    pub max_bytes_per_window: Option<Size>,
    /// Sites (regex on the site key) that may not be suspects at all.
    #[serde(default)]
    pub forbidden_sites: Vec<String>,
}

/// `[memory]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryLimits {
    /// Most live (requested) bytes at any point.
    pub peak_allocated: Option<Size>,
    /// Σ block sizes held at the end.
    pub end_allocated: Option<Size>,
    /// Σ segment sizes at the end.
    pub end_reserved: Option<Size>,
}

/// `[[sites]]`: a limit for the sites matching `pattern`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteLimit {
    /// Regex on the site key (`file:line:function`).
    pub pattern: String,
    /// Largest growth per window.
    pub max_bytes_per_window: Option<Size>,
    /// Largest live bytes at the end.
    pub max_end_bytes: Option<Size>,
}

/// `[windows]`: defaults for `--windows` and `--within`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowDefaults {
    /// As `--windows`.
    pub spec: Option<String>,
    /// As `--within`.
    pub within: Option<String>,
}

/// `[baseline]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineOptions {
    /// Allowed increase over the baseline: `"10%"` or a size.
    pub tolerance: Option<String>,
}

/// A budget file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Window defaults.
    #[serde(default)]
    pub windows: WindowDefaults,
    /// Growth limits.
    #[serde(default)]
    pub leaks: LeakLimits,
    /// Memory limits.
    #[serde(default)]
    pub memory: MemoryLimits,
    /// Per-site limits.
    #[serde(default)]
    pub sites: Vec<SiteLimit>,
    /// Baseline tolerance.
    #[serde(default)]
    pub baseline: BaselineOptions,
}

impl Budget {
    /// Parses a budget file's text, checking sizes and regexes.
    pub fn parse(text: &str) -> Result<Budget, String> {
        let b: Budget = toml::from_str(text).map_err(|e| e.to_string())?;
        let sizes = [
            b.leaks.max_bytes_per_window.as_ref(),
            b.memory.peak_allocated.as_ref(),
            b.memory.end_allocated.as_ref(),
            b.memory.end_reserved.as_ref(),
        ];
        for s in sizes.into_iter().flatten() {
            s.bytes()?;
        }
        for s in &b.sites {
            Regex::new(&s.pattern)
                .map_err(|e| format!("[[sites]] pattern `{}`: {e}", s.pattern))?;
            for x in [&s.max_bytes_per_window, &s.max_end_bytes]
                .into_iter()
                .flatten()
            {
                x.bytes()?;
            }
        }
        for f in &b.leaks.forbidden_sites {
            Regex::new(f).map_err(|e| format!("forbidden_sites `{f}`: {e}"))?;
        }
        if let Some(t) = &b.baseline.tolerance {
            tolerance(t, 1)?;
        }
        Ok(b)
    }
}

/// The allowed increase over `base` for a tolerance `"10%"` or a size.
fn tolerance(t: &str, base: u64) -> Result<u64, String> {
    match t.trim().strip_suffix('%') {
        Some(p) => {
            let p: f64 = p.trim().parse().map_err(|_| format!("tolerance `{t}`"))?;
            Ok((base as f64 * p / 100.0).round() as u64)
        }
        None => parse_size(t),
    }
}

/// What one snapshot measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measured {
    /// Largest suspect rate.
    pub max_bytes_per_window: u64,
    /// The site with it.
    pub max_site: Option<String>,
    /// Peak live bytes.
    pub peak_allocated: u64,
    /// Held at the end.
    pub end_allocated: u64,
    /// Reserved at the end.
    pub end_reserved: u64,
}

/// One limit.
#[derive(Clone, Debug, Serialize)]
pub struct Case {
    /// Name, such as `leaks.max_bytes_per_window`.
    pub name: String,
    /// Measured value (bytes).
    pub value: u64,
    /// The limit (bytes).
    pub limit: u64,
    /// Whether it holds.
    pub passed: bool,
    /// The numbers in words, and the stack for growth violations.
    pub detail: String,
}

/// One snapshot's check.
#[derive(Clone, Debug, Serialize)]
pub struct FileCheck {
    /// File.
    pub file: String,
    /// Measurements.
    pub measured: Measured,
    /// Cases.
    pub cases: Vec<Case>,
}

/// The `check` report (`leakscope.check/1`).
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// Schema name.
    pub schema: &'static str,
    /// Every snapshot checked.
    pub files: Vec<FileCheck>,
    /// Whether every case passed.
    pub passed: bool,
}

fn case(name: &str, value: u64, limit: u64, detail: String) -> Case {
    Case {
        name: name.to_string(),
        value,
        limit,
        passed: value <= limit,
        detail,
    }
}

/// Measures one snapshot's leak report and end state.
pub fn measure(leaks: &LeakReport, peak: u64, end_allocated: u64, end_reserved: u64) -> Measured {
    // Suspects come largest rate first (ties by site), so the first is the one to name.
    let top = leaks.suspects.first();
    Measured {
        max_bytes_per_window: top.map_or(0, |g| g.bytes_per_window),
        max_site: top.map(|g| g.key.clone()),
        peak_allocated: peak,
        end_allocated,
        end_reserved,
    }
}

/// Reads the numbers of a baseline: the JSON of an earlier `check` (first file) or `leaks`.
pub fn baseline_from_json(v: &serde_json::Value) -> Result<Measured, String> {
    if let Some(m) = v["files"].get(0).map(|f| &f["measured"]) {
        return serde_json::from_value(m.clone()).map_err(|e| format!("baseline: {e}"));
    }
    if v["schema"] == "leakscope.leaks/1" {
        let top = v["suspects"]
            .as_array()
            .into_iter()
            .flatten()
            .max_by_key(|g| g["bytes_per_window"].as_u64().unwrap_or(0));
        return Ok(Measured {
            max_bytes_per_window: top
                .and_then(|g| g["bytes_per_window"].as_u64())
                .unwrap_or(0),
            max_site: top.and_then(|g| g["key"].as_str()).map(str::to_owned),
            peak_allocated: 0,
            end_allocated: 0,
            end_reserved: 0,
        });
    }
    Err("baseline: not the JSON of `leakscope check` or `leakscope leaks`".into())
}

/// Applies `budget` (and a baseline) to one snapshot.
pub fn check_file(
    file: &str,
    budget: &Budget,
    leaks: &LeakReport,
    end_by_site: &[(String, u64)],
    measured: Measured,
    baseline: Option<&Measured>,
) -> FileCheck {
    let mut cases = Vec::new();
    let b = |s: &Option<Size>| s.as_ref().and_then(|x| x.bytes().ok());
    let stack_of = |key: &str| {
        leaks
            .suspects
            .iter()
            .find(|g| g.key == key)
            .map(|g| {
                if g.stack.is_empty() {
                    "(no frames recorded)".to_string()
                } else {
                    g.stack
                        .iter()
                        .take(8)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("\n    ")
                }
            })
            .unwrap_or_default()
    };
    if let Some(limit) = b(&budget.leaks.max_bytes_per_window) {
        let site = measured.max_site.clone().unwrap_or_default();
        cases.push(case(
            "leaks.max_bytes_per_window",
            measured.max_bytes_per_window,
            limit,
            if measured.max_bytes_per_window > limit {
                format!(
                    "{site} grows by {} B per window; stack:\n    {}",
                    measured.max_bytes_per_window,
                    stack_of(&site)
                )
            } else {
                "no suspect grows faster".into()
            },
        ));
    }
    for pat in &budget.leaks.forbidden_sites {
        let Ok(re) = Regex::new(pat) else { continue };
        let hit = leaks.suspects.iter().find(|g| re.is_match(&g.key));
        cases.push(Case {
            name: format!("leaks.forbidden_sites[{pat}]"),
            value: hit.map_or(0, |g| g.bytes_per_window),
            limit: 0,
            passed: hit.is_none(),
            detail: match hit {
                Some(g) => format!(
                    "{} grows ({}, {} B per window); stack:\n    {}",
                    g.key,
                    g.kind,
                    g.bytes_per_window,
                    stack_of(&g.key)
                ),
                None => "no suspect matches".into(),
            },
        });
    }
    for (name, value, limit) in [
        (
            "memory.peak_allocated",
            measured.peak_allocated,
            b(&budget.memory.peak_allocated),
        ),
        (
            "memory.end_allocated",
            measured.end_allocated,
            b(&budget.memory.end_allocated),
        ),
        (
            "memory.end_reserved",
            measured.end_reserved,
            b(&budget.memory.end_reserved),
        ),
    ] {
        if let Some(limit) = limit {
            cases.push(case(
                name,
                value,
                limit,
                format!("{value} B against {limit} B"),
            ));
        }
    }
    for s in &budget.sites {
        let Ok(re) = Regex::new(&s.pattern) else {
            continue;
        };
        if let Some(limit) = b(&s.max_bytes_per_window) {
            let worst = leaks
                .suspects
                .iter()
                .chain(&leaks.warmup)
                .filter(|g| re.is_match(&g.key))
                .max_by_key(|g| g.bytes_per_window);
            let v = worst.map_or(0, |g| g.bytes_per_window);
            cases.push(case(
                &format!("sites[{}].max_bytes_per_window", s.pattern),
                v,
                limit,
                worst.map_or_else(
                    || "no matching site grows".into(),
                    |g| format!("{} grows by {v} B per window", g.key),
                ),
            ));
        }
        if let Some(limit) = b(&s.max_end_bytes) {
            let v: u64 = end_by_site
                .iter()
                .filter(|(k, _)| re.is_match(k))
                .map(|(_, b)| b)
                .sum();
            cases.push(case(
                &format!("sites[{}].max_end_bytes", s.pattern),
                v,
                limit,
                format!("matching sites hold {v} B at the end"),
            ));
        }
    }
    if let Some(base) = baseline {
        let tol = budget.baseline.tolerance.as_deref().unwrap_or("0%");
        for (name, value, was) in [
            (
                "baseline.max_bytes_per_window",
                measured.max_bytes_per_window,
                base.max_bytes_per_window,
            ),
            (
                "baseline.peak_allocated",
                measured.peak_allocated,
                base.peak_allocated,
            ),
            (
                "baseline.end_allocated",
                measured.end_allocated,
                base.end_allocated,
            ),
        ] {
            if was == 0 && name != "baseline.max_bytes_per_window" {
                continue; // not measured in the baseline (a `leaks` JSON)
            }
            let limit = was + tolerance(tol, was).unwrap_or(0);
            cases.push(case(
                name,
                value,
                limit,
                format!("{value} B against {was} B in the baseline (+{tol})"),
            ));
        }
    }
    FileCheck {
        file: file.to_string(),
        measured,
        cases,
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The report as JUnit XML: a test suite per snapshot, a test case per limit.
pub fn junit(r: &CheckReport) -> String {
    let mut o = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"leakscope check\">\n",
    );
    for f in &r.files {
        let failures = f.cases.iter().filter(|c| !c.passed).count();
        o.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\">\n",
            xml_escape(&f.file),
            f.cases.len(),
            failures
        ));
        for c in &f.cases {
            o.push_str(&format!(
                "    <testcase classname=\"leakscope.check\" name=\"{}\">",
                xml_escape(&c.name)
            ));
            if !c.passed {
                o.push_str(&format!(
                    "\n      <failure message=\"{} exceeds {}\">{}</failure>\n    ",
                    c.value,
                    c.limit,
                    xml_escape(&c.detail)
                ));
            }
            o.push_str("</testcase>\n");
        }
        o.push_str("  </testsuite>\n");
    }
    o.push_str("</testsuites>\n");
    o
}
