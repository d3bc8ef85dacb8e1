//! Terminal rendering of [`RanksReport`].

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, terminal_text};
use crate::report::{RanksReport, Special};

/// Special files shown by name in the warning; the rest are counted.
const SPECIAL_NAMED: usize = 5;

/// The warning line for the FIFOs, sockets and devices a walk skipped (none: `None`).
pub fn special_warning(special: &[Special]) -> Option<String> {
    if special.is_empty() {
        return None;
    }
    let n = special.len();
    let mut names: Vec<String> = special
        .iter()
        .take(SPECIAL_NAMED)
        .map(|s| {
            format!(
                "{} ({})",
                terminal_text(&s.file.display().to_string()),
                s.kind
            )
        })
        .collect();
    if n > SPECIAL_NAMED {
        names.push(format!("and {} more", count((n - SPECIAL_NAMED) as u64)));
    }
    Some(format!(
        "warning: {} special {} skipped, never opened (not regular files): {}",
        count(n as u64),
        if n == 1 { "file" } else { "files" },
        names.join(", ")
    ))
}

/// The row of a file that could not be read, in the tables of runs: the cells that name
/// it (`lead`: step, rank and what else the table shows), dashes up to the last two
/// columns, then `error` and the message; `columns` cells in all.
pub(crate) fn error_row(lead: Vec<String>, columns: usize, error: &str) -> Vec<String> {
    let mut row = lead;
    while row.len() + 2 < columns {
        row.push("-".into());
    }
    row.push("error".into());
    row.push(terminal_text(error).into_owned());
    row
}

/// A step as tables show it: `-` for a file outside a run's layout.
pub(crate) fn step_cell(step: &str) -> String {
    if step.is_empty() {
        "-".into()
    } else {
        terminal_text(step).into_owned()
    }
}

/// `file` as tables show it: below the run's directory `dir` when it is there.
pub(crate) fn file_cell(dir: &str, file: &str) -> String {
    let p = std::path::Path::new(file);
    terminal_text(
        &p.strip_prefix(dir)
            .map_or_else(|_| file.to_string(), |r| r.display().to_string()),
    )
    .into_owned()
}

/// One line per rank and step, outliers marked; then the trend per rank.
pub fn text(r: &RanksReport, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}: {} snapshots{}",
        terminal_text(&r.dir),
        count(r.ranks.len() as u64),
        if r.skipped_files > 0 {
            format!(" ({} other files skipped)", count(r.skipped_files))
        } else {
            String::new()
        }
    );
    if let Some(w) = special_warning(&r.special_files) {
        let _ = writeln!(o, "{w}");
    }
    o.push('\n');
    let mut t = Table::new(&[
        ("step", Align::Left),
        ("rank", Align::Right),
        ("file", Align::Left),
        ("device", Align::Right),
        ("peak", Align::Right),
        ("allocated at end", Align::Right),
        ("growth/window", Align::Right),
        ("", Align::Left),
        ("top suspect", Align::Left),
    ]);
    for x in &r.ranks {
        let rank = x.rank.map_or_else(|| "-".into(), |v| v.to_string());
        let file = file_cell(&r.dir, &x.file);
        if let Some(e) = &x.error {
            t.row(error_row(vec![step_cell(&x.step), rank, file], 9, e));
            continue;
        }
        t.row([
            step_cell(&x.step),
            rank,
            file,
            x.device.map_or_else(|| "-".into(), |d| d.to_string()),
            bytes(x.peak_requested_bytes),
            bytes(x.end_allocated_bytes),
            if x.verdicts {
                bytes(x.growth_bytes_per_window)
            } else {
                "no verdicts".into()
            },
            match (x.outlier, x.disagrees) {
                (true, true) => "OUTLIER, inconsistent".into(),
                (true, false) => "OUTLIER".into(),
                (false, true) => "inconsistent".into(),
                (false, false) => String::new(),
            },
            x.top_suspect
                .as_ref()
                .map_or_else(String::new, |s| s.label.clone()),
        ]);
    }
    o.push_str(&t.render(style));
    if !r.trends.is_empty() {
        o.push('\n');
        let _ = writeln!(
            o,
            "{}",
            style.bold("allocated at the end of each step, per rank")
        );
        for tr in &r.trends {
            let series: Vec<String> = tr.end_allocated_bytes.iter().map(|&b| bytes(b)).collect();
            let change = if tr.change_bytes < 0 {
                format!("-{}", bytes(tr.change_bytes.unsigned_abs()))
            } else {
                format!("+{}", bytes(tr.change_bytes as u64))
            };
            let _ = writeln!(
                o,
                "  rank {}: {} ({change} over steps {})",
                tr.rank.map_or_else(|| "-".into(), |v| v.to_string()),
                series.join(" -> "),
                terminal_text(&tr.steps.join(", "))
            );
        }
    }
    series_text(r, style, &mut o);
    o
}

/// Each rank's verdict across steps (its files read as a series).
fn series_text(r: &RanksReport, style: Style, o: &mut String) {
    if r.series.is_empty() {
        return;
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "{}",
        style.bold("growth across steps, per rank (its files read as a series)")
    );
    let mut t = Table::new(&[
        ("rank", Align::Right),
        ("device", Align::Right),
        ("steps", Align::Right),
        ("per step", Align::Right),
        ("kind", Align::Left),
        ("since step", Align::Left),
        ("top growing site", Align::Left),
    ]);
    for x in &r.series {
        let rank = x.rank.map_or_else(|| "-".into(), |v| v.to_string());
        let device = x.device.map_or_else(|| "-".into(), |d| d.to_string());
        let steps = count(x.steps.len() as u64);
        if let Some(e) = &x.error {
            t.row([
                rank,
                device,
                steps,
                "-".into(),
                "error".into(),
                String::new(),
                e.clone(),
            ]);
            continue;
        }
        let (per, kind, site) = match (&x.top_site, x.top_kind) {
            (Some(s), Some(k)) => (bytes(x.top_bytes_per_step), k.to_string(), s.label.clone()),
            _ if !x.verdicts => ("-".into(), "no verdicts".into(), String::new()),
            _ => ("0 B".into(), "no suspect".into(), String::new()),
        };
        t.row([
            rank,
            device,
            steps,
            per,
            kind,
            x.top_onset_step.clone().unwrap_or_default(),
            site,
        ]);
    }
    o.push_str(&t.render(style));
}
