//! Terminal rendering of [`RanksReport`].

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, terminal_text};
use crate::session::{RanksReport, Special};

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

/// The row of a rank and step that could not be read, in the 8-column tables of runs:
/// step, rank, four dashes, `error`, the message.
pub(crate) fn error_row(step: &str, rank: String, error: &str) -> [String; 8] {
    let dash = || "-".to_string();
    [
        step.to_string(),
        rank,
        dash(),
        dash(),
        dash(),
        dash(),
        "error".into(),
        error.to_string(),
    ]
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
        ("device", Align::Right),
        ("peak", Align::Right),
        ("allocated at end", Align::Right),
        ("growth/window", Align::Right),
        ("", Align::Left),
        ("top suspect", Align::Left),
    ]);
    for x in &r.ranks {
        let rank = x.rank.map_or_else(|| "-".into(), |v| v.to_string());
        if let Some(e) = &x.error {
            t.row(error_row(&x.step, rank, e));
            continue;
        }
        t.row([
            x.step.clone(),
            rank,
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
