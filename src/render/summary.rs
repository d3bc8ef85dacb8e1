//! Terminal rendering of [`Summary`].

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, terminal_text};
use crate::analysis::summary::{Summary, Totals};

fn opt_time(t: Option<i64>) -> String {
    t.map_or_else(|| "-".into(), |v| v.to_string())
}

/// The snapshot in one line, as a notebook's `repr` shows it: the devices that hold
/// something (those that recorded nothing counted apart, as the per-device reports name
/// them), reserved and requested bytes, trace events.
pub fn line(s: &Summary) -> String {
    let busy = s
        .devices
        .iter()
        .filter(|d| d.totals.segments > 0 || d.totals.trace_events > 0)
        .count() as u64;
    let idle = s.devices.len() as u64 - busy;
    let devices = match (busy, idle) {
        (1, 0) => "1 device".to_string(),
        (n, 0) => format!("{} devices", count(n)),
        (n, m) => format!(
            "{} {} with memory ({} more recorded nothing)",
            count(n),
            if n == 1 { "device" } else { "devices" },
            count(m)
        ),
    };
    let t = &s.totals.totals;
    format!(
        "{}: {devices}, {} reserved, {} requested, {} trace events",
        terminal_text(&s.file),
        bytes(t.reserved_bytes),
        bytes(t.requested_bytes),
        count(t.trace_events)
    )
}

/// Renders the summary as text.
pub fn text(s: &Summary, style: Style) -> String {
    let mut o = String::new();
    let f = &s.format;
    let _ = writeln!(o, "{}", style.bold(&terminal_text(&s.file)));
    let proto = f
        .pickle_protocol
        .map_or_else(String::new, |p| format!(" protocol {p}"));
    let pstyle = f
        .pickle_style
        .as_ref()
        .map_or_else(String::new, |p| format!(" ({p} pickler)"));
    let _ = writeln!(
        o,
        "format   {}{proto}{pstyle}, compression {}, layout {}, producer {}, {}",
        f.container, f.compression, f.layout, f.producer, f.era
    );
    o.push('\n');

    let mut t = Table::new(&[
        ("device", Align::Left),
        ("segments", Align::Right),
        ("blocks", Align::Right),
        ("active", Align::Right),
        ("reserved", Align::Right),
        ("allocated", Align::Right),
        ("requested", Align::Right),
        ("rounding", Align::Right),
        ("cached free", Align::Right),
        ("events", Align::Right),
    ]);
    let row = |t: &mut Table, name: String, x: &Totals| {
        t.row([
            name,
            count(x.segments),
            count(x.blocks),
            count(x.active_blocks),
            bytes(x.reserved_bytes),
            bytes(x.allocated_bytes),
            bytes(x.requested_bytes),
            bytes(x.rounding_overhead_bytes),
            bytes(x.cached_free_bytes),
            count(x.trace_events),
        ])
    };
    for d in &s.devices {
        row(&mut t, d.device.to_string(), &d.totals);
    }
    if s.devices.len() > 1 {
        row(&mut t, "total".into(), &s.totals.totals);
    }
    o.push_str(&t.render(style));
    for d in s
        .devices
        .iter()
        .filter(|d| d.pools.iter().any(|p| p.private))
    {
        let _ = writeln!(
            o,
            "\ndevice {} {}",
            d.device,
            super::pools::pools_text(&d.pools)
        );
    }

    let tot = &s.totals.totals;
    if !tot.blocks_by_state.is_empty() {
        let states: Vec<String> = tot
            .blocks_by_state
            .iter()
            .map(|(k, v)| format!("{} {}", terminal_text(k), count(*v)))
            .collect();
        let _ = writeln!(o, "\nblocks by state   {}", states.join(", "));
    }
    if !tot.actions.is_empty() {
        let mut acts: Vec<(&String, &u64)> = tot.actions.iter().collect();
        acts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let acts: Vec<String> = acts
            .into_iter()
            .map(|(k, v)| format!("{} {}", terminal_text(k), count(*v)))
            .collect();
        let _ = writeln!(o, "events by action  {}", acts.join(", "));
    }

    let tr = &s.trace;
    o.push('\n');
    let _ = writeln!(
        o,
        "trace    {} ({} to {} us){}",
        if tr.wrapped {
            "incomplete: the ring buffer wrapped or recording started late"
        } else if tot.trace_events == 0 {
            "empty"
        } else {
            "complete"
        },
        opt_time(tr.first_time_us),
        opt_time(tr.last_time_us),
        if tr.has_time_us {
            ""
        } else {
            ", no time_us in this file"
        }
    );
    if tr.replay_mismatches > 0 {
        let _ = writeln!(
            o,
            "         replaying the trace leaves {} allocations live that segments do not hold (events were lost)",
            count(tr.replay_mismatches)
        );
    }
    if tr.wrapped || tr.unmatched_segment_frees > 0 {
        let _ = writeln!(
            o,
            "         {} frees with no alloc in the trace, {} live blocks allocated before it, {} segment frees with no segment alloc",
            count(tr.unmatched_frees),
            count(tr.pre_trace_blocks),
            count(tr.unmatched_segment_frees)
        );
    }
    let _ = writeln!(
        o,
        "frames   {} unique frames, {} unique stacks",
        count(s.frames.unique_frames),
        count(s.frames.unique_stacks)
    );
    if s.annotations > 0 {
        let names: Vec<String> = s
            .annotation_names
            .iter()
            .take(6)
            .map(|(n, c)| format!("{} x{c}", terminal_text(n)))
            .collect();
        let _ = writeln!(
            o,
            "annotations {} ({})",
            count(s.annotations),
            names.join(", ")
        );
    }
    for w in &s.warnings {
        let _ = writeln!(o, "warning: {}", terminal_text(w));
    }
    if tot.segments == 0 && tot.trace_events == 0 {
        let _ = writeln!(
            o,
            "nothing recorded: no segments and no trace events on any device"
        );
    }
    o
}
