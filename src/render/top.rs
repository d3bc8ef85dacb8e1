//! Terminal rendering of [`TopReport`].

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count};
use crate::analysis::top::TopReport;

fn point_text(r: &TopReport) -> String {
    let at = &r.at;
    let ev = at.event_index.map_or_else(
        || "before the first event".into(),
        |i| format!("after event {i}"),
    );
    let t = at
        .time_us
        .map_or_else(String::new, |t| format!(", time_us {t}"));
    format!("{} ({ev}{t})", at.kind)
}

/// Renders the report as a table.
pub fn text(r: &TopReport, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "device {}, at {}: {} live in {} allocations, by {}",
        r.device,
        point_text(r),
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
