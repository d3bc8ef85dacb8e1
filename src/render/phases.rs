//! Terminal rendering of `phases`: per device, each annotation name summed up, then the
//! ranges themselves (the first [`RANGES_SHOWN`]; the JSON holds every one).

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, counted, per_device, signed_bytes};
use crate::analysis::phases::DevicePhases;
use crate::report::PhasesReport;

/// Ranges listed one by one per device in the text.
pub const RANGES_SHOWN: usize = 40;

/// Renders the report.
pub fn text(r: &PhasesReport, style: Style) -> String {
    per_device(&r.file, &r.devices, &r.idle_devices, |d| {
        device_text(d, style)
    })
}

fn device_text(d: &DevicePhases, style: Style) -> String {
    let mut o = String::new();
    if d.phases.is_empty() {
        let _ = writeln!(
            o,
            "device {}: no record_function ranges (torch records them in external_annotations from 2.5 on; wrap phases in torch.profiler.record_function)",
            d.device
        );
        return o;
    }
    let _ = writeln!(
        o,
        "device {}: {} of {}; live requested bytes at each range's start, highest point and end\n",
        d.device,
        counted(
            d.phases.len() as u64,
            "record_function range",
            "record_function ranges"
        ),
        counted(d.names.len() as u64, "name", "names"),
    );
    let mut t = Table::new(&[
        ("ranges", Align::Right),
        ("peak", Align::Right),
        ("most rise", Align::Right),
        ("left live", Align::Right),
        ("grew", Align::Right),
        ("name", Align::Left),
    ]);
    for n in &d.names {
        t.row([
            count(n.count),
            bytes(n.peak_bytes),
            bytes(n.max_rise_bytes),
            signed_bytes(n.growth_bytes),
            format!("{}/{}", n.grew, n.count),
            n.name.clone(),
        ]);
    }
    o.push_str(&t.render(style));
    let shown = d.phases.len().min(RANGES_SHOWN);
    let _ = writeln!(
        o,
        "\nranges in start order{}",
        if shown < d.phases.len() {
            format!(
                " (the first {shown} of {}; --json has every one)",
                count(d.phases.len() as u64)
            )
        } else {
            String::new()
        }
    );
    let mut t = Table::new(&[
        ("events", Align::Right),
        ("start", Align::Right),
        ("peak", Align::Right),
        ("end", Align::Right),
        ("left", Align::Right),
        ("range", Align::Left),
    ]);
    for p in &d.phases[..shown] {
        let indent = "  ".repeat(p.depth.min(16) as usize);
        let open = if p.end_time_us.is_none() {
            " (never ended)"
        } else {
            ""
        };
        t.row([
            format!("{}..{}", p.start_event, p.end_event),
            bytes(p.start_bytes),
            bytes(p.peak_bytes),
            bytes(p.end_bytes),
            signed_bytes(p.growth().clamp(i64::MIN.into(), i64::MAX.into()) as i64),
            format!("{indent}{}{open}", p.name),
        ]);
    }
    o.push_str(&t.render(style));
    o
}
