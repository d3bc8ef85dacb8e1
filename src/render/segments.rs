//! Terminal rendering of [`SegmentsReport`]: one line per segment with a bar of its space.

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, per_device};
use crate::analysis::segments::{DeviceSegments, SegmentRow};
use crate::model::size::{end_of, sum_sizes};
use crate::report::SegmentsReport;

const BAR: u64 = 32;

/// A bar of the segment: `#` held, `+` partly held, `.` free, per 1/32 of the segment.
fn bar(s: &SegmentRow) -> String {
    let cell = s.total_size.div_ceil(BAR).max(1);
    // Ends stop at the top of the address space: a file can claim a segment there.
    (0..BAR)
        .map(|i| {
            let (lo, hi) = (
                end_of(s.address, i.saturating_mul(cell)),
                end_of(s.address, (i + 1).saturating_mul(cell).min(s.total_size)),
            );
            if lo >= hi {
                return ' ';
            }
            let held = sum_sizes(s.blocks.iter().filter(|b| b.active).map(|b| {
                hi.min(end_of(b.address, b.size))
                    .saturating_sub(lo.max(b.address))
            }));
            match held {
                0 => '.',
                h if h >= hi - lo => '#',
                _ => '+',
            }
        })
        .collect()
}

/// Renders every device's map and totals.
pub fn text(r: &SegmentsReport, style: Style) -> String {
    let mut o = per_device(&r.file, &r.devices, &r.idle_devices, |d| {
        device_text(d, style)
    });
    for u in &r.unresolved {
        let _ = writeln!(o, "device {}: {}", u.device, u.reason);
    }
    o
}

/// One device's map and totals.
pub fn device_text(r: &DeviceSegments, style: Style) -> String {
    let mut o = String::new();
    let ev = r.at.event_index.map_or_else(
        || "before the first event".into(),
        |i| format!("after event {i}"),
    );
    let _ = writeln!(o, "device {}, segments at {} ({ev})", r.device, r.at.kind);
    o.push('\n');
    let mut t = Table::new(&[
        ("address", Align::Left),
        ("size", Align::Right),
        ("pool", Align::Left),
        ("stream", Align::Right),
        ("map (# held, + partly, . free)", Align::Left),
        ("active", Align::Right),
        ("blocks", Align::Right),
        ("free", Align::Right),
        ("largest free", Align::Right),
        ("in blocks", Align::Right),
    ]);
    for s in &r.segments {
        t.row([
            format!(
                "0x{:x}{}",
                s.address,
                if s.expandable { " (exp)" } else { "" }
            ),
            bytes(s.total_size),
            if s.pool_id.is_private() {
                format!("{} {}", s.pool, s.pool_id)
            } else {
                s.pool.clone()
            },
            s.stream.to_string(),
            bar(s),
            bytes(s.active_bytes),
            count(s.blocks.iter().filter(|b| b.active).count() as u64),
            bytes(s.external_free_bytes),
            bytes(s.largest_free_block_bytes),
            bytes(s.internal_free_bytes),
        ]);
    }
    o.push_str(&t.render(style));
    let tt = &r.totals;
    let _ = writeln!(
        o,
        "\n{} segments, {} reserved: {} active ({} allocated, {} pending free; {} requested, {} lost to rounding inside blocks), {} free between blocks",
        count(tt.segments),
        bytes(tt.reserved_bytes),
        bytes(tt.active_bytes),
        bytes(tt.allocated_bytes),
        bytes(tt.active_bytes.saturating_sub(tt.allocated_bytes)),
        bytes(tt.requested_bytes),
        bytes(tt.internal_free_bytes),
        bytes(tt.external_free_bytes)
    );
    if r.pools.iter().any(|p| p.private) {
        let _ = writeln!(o, "{}", super::pools::pools_text(&r.pools));
    }
    if r.reconstruction_unresolved > 0 {
        let _ = writeln!(
            o,
            "({} events could not be placed to reach this point: the map is approximate)",
            count(r.reconstruction_unresolved)
        );
    }
    o
}
