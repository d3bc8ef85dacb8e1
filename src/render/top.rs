//! Terminal rendering of `top`: per device, what holds memory at the point.

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, per_device};
use crate::analysis::top::DeviceTop;
use crate::session::TopReport;

/// Renders the report: a table per device, then the devices where the point does not
/// exist and those with nothing recorded.
pub fn text(r: &TopReport, style: Style) -> String {
    let mut o = per_device(&r.file, &r.devices, &r.idle_devices, |d| {
        device_text(d, r.by.unwrap_or_default().name(), style)
    });
    for u in &r.unresolved {
        let _ = writeln!(o, "device {}: {}", u.device, u.reason);
    }
    o
}

fn share(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 / whole as f64 * 100.0)
    }
}

/// One device's table.
pub fn device_text(r: &DeviceTop, by: &str, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "device {}, at {}: {} live in {} allocations, by {}",
        r.device,
        super::tree::point_text(&r.at),
        bytes(r.at.requested_bytes),
        count(r.total_blocks),
        by
    );
    o.push('\n');
    // Shares are of the larger of the live bytes and the rows' sum, as in the report's
    // rows (they differ only where an impossible file's sizes stopped a count at the top).
    let whole = r.at.requested_bytes.max(r.total_bytes);
    let mut t = Table::new(&[
        ("bytes", Align::Right),
        ("share", Align::Right),
        ("blocks", Align::Right),
        (by, Align::Left),
    ]);
    for row in &r.rows {
        t.row([
            bytes(row.bytes),
            format!("{:.1}%", row.share * 100.0),
            count(row.blocks),
            row.site.label.clone(),
        ]);
    }
    if r.rest.keys > 0 {
        t.row([
            bytes(r.rest.bytes),
            if whole == 0 {
                "0.0%".into()
            } else {
                share(r.rest.bytes, whole)
            },
            count(r.rest.blocks),
            format!("({} more)", count(r.rest.keys)),
        ]);
    }
    t.row([
        bytes(r.total_bytes),
        share(r.total_bytes, whole),
        count(r.total_blocks),
        "total".into(),
    ]);
    o.push_str(&t.render(style));
    o
}
