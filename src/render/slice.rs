//! `slice`'s line on standard error: what was written, per device.

use crate::report::SliceReport;

use super::{bytes, count, terminal_text};

/// `wrote OUT (SIZE): device D events A..=B (N events), SEGMENTS segments, RESERVED reserved; ...`
pub fn written(path: &std::path::Path, r: &SliceReport, len: u64) -> String {
    let devices: Vec<String> = r
        .devices
        .iter()
        .map(|d| {
            let events = match d.first_event {
                Some(first) => format!(
                    "events {}..={} ({} events)",
                    first,
                    first as usize + d.events - 1,
                    count(d.events as u64)
                ),
                None => "no events".to_string(),
            };
            format!(
                "device {} {}, {} segments, {} reserved, {} requested{}",
                d.device,
                events,
                count(d.segments as u64),
                bytes(d.reserved_bytes),
                bytes(d.requested_bytes),
                if d.unresolved > 0 {
                    format!(" ({} events could not be undone)", count(d.unresolved))
                } else {
                    String::new()
                }
            )
        })
        .collect();
    format!(
        "wrote {} ({}): {}; {} annotations",
        terminal_text(&path.display().to_string()),
        bytes(len),
        devices.join("; "),
        count(r.annotations as u64)
    )
}
