//! Terminal rendering of [`TimelineReport`]: per device, how many allocations are drawn
//! one by one and how many summed, and the longest-lived large ones (the bands that
//! dominate the picture). The whole timeline is `--json` or the report's view.

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, per_device};
use crate::analysis::allocations::{Band, DeviceAllocations};
use crate::report::TimelineReport;

/// Bands listed per device in the text.
const LISTED: usize = 15;

/// Renders every device.
pub fn text(r: &TimelineReport, style: Style) -> String {
    per_device(&r.file, &r.devices, &r.idle_devices, |d| {
        device_text(d, style)
    })
}

fn event(e: Option<u32>, none: &str) -> String {
    e.map_or_else(|| none.to_string(), |e| count(u64::from(e)))
}

fn weight(b: &Band, n: u32) -> u128 {
    let life = b.free_event.unwrap_or(n) - b.first_event.unwrap_or(0);
    u128::from(b.bytes) * u128::from(life.max(1))
}

/// One device.
pub fn device_text(d: &DeviceAllocations, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "device {}: {} allocations over {} events; {} drawn one by one (the largest by bytes x lifetime, --max-allocations {}), {} summed in one band",
        d.device,
        count(d.allocations_total as u64),
        count(u64::from(d.events)),
        count(d.allocations.len() as u64),
        count(d.max_allocations as u64),
        count(d.summarized.allocations as u64),
    );
    let mut largest: Vec<&Band> = d.allocations.iter().collect();
    largest.sort_by_key(|b| std::cmp::Reverse(weight(b, d.events)));
    if largest.is_empty() {
        return o;
    }
    o.push('\n');
    let mut t = Table::new(&[
        ("bytes", Align::Right),
        ("from event", Align::Right),
        ("to event", Align::Right),
        ("role", Align::Left),
        ("site", Align::Left),
    ]);
    for b in largest.iter().take(LISTED) {
        t.row([
            bytes(b.bytes),
            event(b.first_event, "start"),
            event(b.free_event, "end"),
            b.role.clone(),
            b.site.clone(),
        ]);
    }
    o.push_str(&t.render(style));
    if largest.len() > LISTED {
        let _ = writeln!(
            o,
            "({} more drawn; every allocation with --json, or the report's timeline)",
            count((largest.len() - LISTED) as u64)
        );
    }
    o
}
