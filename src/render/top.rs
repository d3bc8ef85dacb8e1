//! Terminal rendering of [`TopReport`].

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count};
use crate::analysis::top::TopReport;

/// Renders the report as a table.
pub fn text(r: &TopReport, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "device {}, at {}: {} live in {} allocations, by {}",
        r.device,
        super::tree::point_text(&r.at),
        bytes(r.at.live_bytes),
        count(r.total_blocks),
        r.by
    );
    o.push('\n');
    let mut t = Table::new(&[
        ("bytes", Align::Right),
        ("share", Align::Right),
        ("blocks", Align::Right),
        (r.by, Align::Left),
    ]);
    for row in &r.rows {
        t.row([
            bytes(row.bytes),
            format!("{:.1}%", row.share * 100.0),
            count(row.blocks),
            row.key.clone(),
        ]);
    }
    if r.rest.keys > 0 {
        let share = if r.at.live_bytes == 0 {
            0.0
        } else {
            r.rest.bytes as f64 / r.at.live_bytes as f64
        };
        t.row([
            bytes(r.rest.bytes),
            format!("{:.1}%", share * 100.0),
            count(r.rest.blocks),
            format!("({} more)", count(r.rest.keys)),
        ]);
    }
    t.row([
        bytes(r.total_bytes),
        if r.at.live_bytes == 0 {
            "-".into()
        } else {
            format!(
                "{:.1}%",
                r.total_bytes as f64 / r.at.live_bytes as f64 * 100.0
            )
        },
        count(r.total_blocks),
        "total".into(),
    ]);
    o.push_str(&t.render(style));
    o
}
