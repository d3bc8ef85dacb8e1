//! Terminal rendering of [`CompareAtReport`]: per device pair, the two points and the
//! sites whose memory there changed most, with what the rest adds up to.

use std::fmt::Write;

use super::{Align, Style, Table, bytes};
use crate::analysis::point_diff::DevicePointDiff;
use crate::session::CompareAtReport;

/// Rows shown per device pair.
const ROWS: usize = 25;

fn signed_bytes(d: i64) -> String {
    match d {
        0 => "0 B".into(),
        d if d > 0 => format!("+{}", bytes(d as u64)),
        d => format!("-{}", bytes(d.unsigned_abs())),
    }
}

fn point(p: &crate::analysis::Point) -> String {
    p.event_index.map_or_else(
        || format!("{} (before the first event)", p.kind),
        |i| format!("{} (after event {i})", p.kind),
    )
}

/// Renders every pair.
pub fn text(r: &CompareAtReport, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "A: {}\nB: {}", r.a, r.b);
    for d in &r.devices {
        device(&mut o, d, style);
    }
    for u in &r.unpaired {
        let _ = writeln!(
            o,
            "\nrun {} device {}: no partner in the other run",
            u.run, u.device
        );
    }
    o
}

fn device(o: &mut String, d: &DevicePointDiff, style: Style) {
    let _ = writeln!(
        o,
        "\ndevice {} (A) vs {} (B): A {} at {}, B {} at {}: {}",
        d.device_a,
        d.device_b,
        bytes(d.a_total),
        point(&d.a),
        bytes(d.b_total),
        point(&d.b),
        signed_bytes(d.difference)
    );
    let mut t = Table::new(&[
        ("A", Align::Right),
        ("B", Align::Right),
        ("difference", Align::Right),
        ("role", Align::Left),
        ("site", Align::Left),
    ]);
    for r in d.rows.iter().take(ROWS) {
        t.row([
            bytes(r.a_bytes),
            bytes(r.b_bytes),
            signed_bytes(r.difference),
            r.role.clone(),
            r.site.label.clone(),
        ]);
    }
    if d.rows.len() > ROWS {
        let rest = &d.rows[ROWS..];
        let (a, b): (u64, u64) = (
            rest.iter().map(|r| r.a_bytes).sum(),
            rest.iter().map(|r| r.b_bytes).sum(),
        );
        t.row([
            bytes(a),
            bytes(b),
            signed_bytes(rest.iter().map(|r| r.difference).sum()),
            String::new(),
            format!("{} more sites", rest.len()),
        ]);
    }
    o.push('\n');
    o.push_str(&t.render(style));
}
