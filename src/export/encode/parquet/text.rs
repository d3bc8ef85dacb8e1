//! What an export wrote, for the terminal: a line per table, then the inputs that could
//! not be read.

use std::fmt::Write;

use crate::export::ExportSummary;
use crate::render::{Align, Style, Table, count, terminal_text};

/// The tables with their rows and files; the counts of files read, failed and skipped.
pub fn text(s: &ExportSummary, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}: {} files read{}{}",
        terminal_text(&s.out_dir),
        count(s.files_read),
        if s.failed.is_empty() {
            String::new()
        } else {
            format!(", {} could not be read", count(s.failed.len() as u64))
        },
        if s.skipped_files > 0 {
            format!(" ({} other files skipped)", count(s.skipped_files))
        } else {
            String::new()
        }
    );
    if let Some(w) = crate::render::ranks::special_warning(&s.special_files) {
        let _ = writeln!(o, "{w}");
    }
    o.push('\n');
    let mut t = Table::new(&[
        ("table", Align::Left),
        ("rows", Align::Right),
        ("file", Align::Left),
    ]);
    for x in &s.tables {
        t.row([x.table.to_string(), count(x.rows), x.path.clone()]);
    }
    o.push_str(&t.render(style));
    for f in &s.failed {
        let _ = writeln!(o, "not read: {}", terminal_text(&f.error));
    }
    o
}
