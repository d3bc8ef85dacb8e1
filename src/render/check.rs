//! Terminal rendering of [`CheckReport`].

use std::fmt::Write;

use super::{Style, bytes};
use crate::analysis::check::CheckReport;

/// One line per limit, failures with their numbers and stack.
pub fn text(r: &CheckReport, style: Style) -> String {
    let mut o = String::new();
    for f in &r.files {
        let failed = f.cases.iter().filter(|c| !c.passed).count();
        let _ = writeln!(
            o,
            "{}",
            style.bold(&format!(
                "{}: {}",
                f.file,
                if failed == 0 {
                    "within budget".to_string()
                } else {
                    format!("{failed} limit(s) exceeded")
                }
            ))
        );
        for c in &f.cases {
            let _ = writeln!(
                o,
                "  {} {}: {} (limit {})",
                if c.passed { "ok  " } else { "FAIL" },
                c.name,
                bytes(c.value),
                bytes(c.limit)
            );
            if !c.passed {
                let _ = writeln!(o, "       {}", c.detail.replace('\n', "\n       "));
            }
        }
        if f.cases.is_empty() {
            let _ = writeln!(o, "  (the budget sets no limit)");
        }
    }
    o
}
