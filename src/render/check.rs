//! Terminal rendering of `check`, and each case's numbers in words (JUnit uses them too).

use std::fmt::Write;

use super::{Style, bytes, terminal_text};
use crate::budget::gate::{Case, Limit};
use crate::report::CheckReport;

/// What a case's numbers mean, in words: for growth, the site and its stack.
pub fn case_detail(c: &Case) -> String {
    let stack = || {
        if c.stack.is_empty() {
            "(no frames recorded)".to_string()
        } else {
            let frames: Vec<_> = c.stack.iter().map(|f| terminal_text(f)).collect();
            frames.join("\n    ")
        }
    };
    let site = terminal_text(c.site.as_ref().map_or("", |s| s.label.as_str()));
    if let Some(why) = &c.unjudged {
        return format!(
            "cannot be checked: no per-window verdicts ({})",
            terminal_text(why)
        );
    }
    match &c.name {
        Limit::MaxBytesPerWindow if c.passed => "no suspect grows faster".into(),
        Limit::MaxBytesPerWindow => format!(
            "{site} grows by {} per window; stack:\n    {}",
            bytes(c.value),
            stack()
        ),
        Limit::ForbiddenSite(_) if c.passed => "no suspect matches".into(),
        Limit::ForbiddenSite(_) => format!(
            "{site} grows ({}, {} per window); stack:\n    {}",
            c.kind.map_or("?", |k| k.as_str()),
            bytes(c.value),
            stack()
        ),
        Limit::MaxReservedBytesPerWindow if c.value == 0 => {
            "reserved memory does not grow apart from live memory".into()
        }
        Limit::MaxReservedBytesPerWindow => format!(
            "cached free memory grows by {} per window while live memory does not (`leakscope leaks` names the cause)",
            bytes(c.value)
        ),
        Limit::SiteBytesPerWindow(_) if c.site.is_none() => "no matching site grows".into(),
        Limit::SiteBytesPerWindow(_) => {
            format!("{site} grows by {} per window", bytes(c.value))
        }
        Limit::SiteEndBytes(_) => format!("matching sites hold {} at the end", bytes(c.value)),
        Limit::Baseline(_) => format!(
            "{} against {} in the baseline (limit {})",
            bytes(c.value),
            bytes(c.baseline.unwrap_or(0)),
            bytes(c.limit)
        ),
        Limit::PeakRequested | Limit::PeakReserved | Limit::EndAllocated | Limit::EndReserved => {
            format!("{} against {}", bytes(c.value), bytes(c.limit))
        }
        Limit::PeakRequestedRole(role) => format!(
            "{role} memory peaks at {} against {}",
            bytes(c.value),
            bytes(c.limit)
        ),
    }
}

/// One line per limit, failures with their numbers and stack; per device when a file has
/// several.
pub fn text(r: &CheckReport, style: Style) -> String {
    let mut o = String::new();
    for f in &r.files {
        let count = |judged: bool| -> usize {
            f.devices
                .iter()
                .map(|d| {
                    d.cases
                        .iter()
                        .filter(|c| !c.passed && c.unjudged.is_none() == judged)
                        .count()
                })
                .sum()
        };
        let (failed, unjudged) = (count(true), count(false));
        let _ = writeln!(
            o,
            "{}",
            style.bold(&format!(
                "{}: {}",
                terminal_text(&f.file),
                match (failed, unjudged) {
                    (0, 0) => "within budget".to_string(),
                    (n, 0) => format!("{n} limit(s) not met"),
                    (0, u) => format!("{u} limit(s) could not be judged"),
                    (n, u) => format!("{n} limit(s) not met, {u} could not be judged"),
                }
            ))
        );
        let several = f.devices.len() > 1;
        for d in &f.devices {
            if several {
                let _ = writeln!(o, "  device {}", d.device);
            }
            let indent = if several { "    " } else { "  " };
            for c in &d.cases {
                // A limit that could not be judged has no number to show: it is neither
                // met nor exceeded, so it says so instead of FAIL beside a 0.
                let _ = match c.unjudged {
                    Some(_) => writeln!(
                        o,
                        "{indent}{} {}: not judged (limit {})",
                        style.bold("????"),
                        terminal_text(&c.name.to_string()),
                        bytes(c.limit)
                    ),
                    None => writeln!(
                        o,
                        "{indent}{} {}: {} (limit {})",
                        if c.passed { "ok  " } else { "FAIL" },
                        terminal_text(&c.name.to_string()),
                        bytes(c.value),
                        bytes(c.limit)
                    ),
                };
                if !c.passed {
                    let pad = format!("{indent}     ");
                    let _ = writeln!(
                        o,
                        "{pad}{}",
                        case_detail(c).replace('\n', &format!("\n{pad}"))
                    );
                }
            }
        }
        if f.devices.iter().all(|d| d.cases.is_empty()) {
            let _ = writeln!(
                o,
                "  {}",
                if f.devices.is_empty() {
                    "(nothing recorded in this file)"
                } else {
                    "(the budget sets no limit)"
                }
            );
        }
    }
    o
}
