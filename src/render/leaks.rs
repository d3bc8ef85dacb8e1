//! Terminal rendering of [`LeakReport`] and [`Windows`].

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count};
use crate::analysis::leaks::{Growth, LeakReport};
use crate::windows::Windows;

fn release(g: &Growth) -> String {
    match &g.released_at {
        Some(r) => format!(
            "freed from event {} in {} window(s){}",
            r.event_index,
            r.release_windows,
            r.site
                .as_ref()
                .map_or_else(String::new, |s| format!(" by {s}"))
        ),
        None if g.kind == "leak" => "never freed in the trace".into(),
        None => String::new(),
    }
}

/// Renders the report: suspects, then warm-up and bounded growth.
pub fn text(r: &LeakReport, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "device {}: {} windows from {} ({}), {} events{}",
        r.device,
        count(r.windows.count),
        r.windows.source,
        r.windows.reason,
        count(r.trace.events),
        if r.trace.wrapped {
            "; the trace misses part of the history"
        } else {
            ""
        }
    );
    o.push('\n');
    if r.suspects.is_empty() {
        let _ = writeln!(
            o,
            "{}",
            style.bold("no site grows in most windows: no leak suspect")
        );
    } else {
        let _ = writeln!(o, "{}", style.bold("suspects (memory kept per window)"));
        let mut t = Table::new(&[
            ("per window", Align::Right),
            ("windows", Align::Right),
            ("held at most", Align::Right),
            ("at end", Align::Right),
            ("kind", Align::Left),
            ("group", Align::Right),
            (r.by, Align::Left),
        ]);
        for g in &r.suspects {
            t.row([
                bytes(g.bytes_per_window),
                format!("{}/{}", g.windows_growing, g.windows_total),
                bytes(g.retained_bytes),
                bytes(g.bytes_at_end),
                g.kind.to_string(),
                g.group.map_or_else(String::new, |x| x.to_string()),
                g.key.clone(),
            ]);
        }
        o.push_str(&t.render(style));
        o.push('\n');
        for g in &r.suspects {
            let rel = release(g);
            let _ = writeln!(o, "  {} ({}): {}", g.key, g.kind, rel);
        }
        for gr in r.groups.iter().filter(|g| g.members.len() > 1) {
            let _ = writeln!(
                o,
                "  group {}: {} sites kept together, {} per window; likely root {}",
                gr.id,
                gr.members.len(),
                bytes(gr.bytes_per_window),
                gr.root
            );
        }
    }
    if !r.warmup.is_empty() {
        o.push('\n');
        let _ = writeln!(
            o,
            "{}",
            style.bold("not suspects (warm-up, bounded, sporadic)")
        );
        let mut t = Table::new(&[
            ("held at most", Align::Right),
            ("windows", Align::Right),
            ("kind", Align::Left),
            (r.by, Align::Left),
        ]);
        for g in r.warmup.iter().take(10) {
            t.row([
                bytes(g.retained_bytes),
                format!("{}/{}", g.windows_growing, g.windows_total),
                g.kind.to_string(),
                g.key.clone(),
            ]);
        }
        o.push_str(&t.render(style));
        if r.warmup.len() > 10 {
            let _ = writeln!(o, "  ({} more)", r.warmup.len() - 10);
        }
    }
    o
}

/// Renders the windows: where they come from and each one's event range.
pub fn windows_text(w: &Windows, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} windows from {}: {}",
        count(w.len() as u64),
        w.source,
        w.reason
    );
    o.push('\n');
    let mut t = Table::new(&[
        ("window", Align::Right),
        ("first event", Align::Right),
        ("events", Align::Right),
        ("name", Align::Left),
    ]);
    for k in 0..w.len() {
        let (s, e) = w.range(k);
        t.row([
            k.to_string(),
            s.to_string(),
            count((e - s) as u64),
            w.names.get(k).cloned().unwrap_or_default(),
        ]);
    }
    o.push_str(&t.render(style));
    o
}

/// Renders a comparison.
pub fn compare_text(r: &crate::analysis::compare::CompareReport, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "A: {} ({} windows from {})",
        r.a.file, r.a.windows.count, r.a.windows.source
    );
    let _ = writeln!(
        o,
        "B: {} ({} windows from {})",
        r.b.file, r.b.windows.count, r.b.windows.source
    );
    o.push('\n');
    let _ = writeln!(o, "{}", style.bold("growth per window"));
    let mut t = Table::new(&[
        ("A per window", Align::Right),
        ("A kind", Align::Left),
        ("B per window", Align::Right),
        ("B kind", Align::Left),
        ("B - A", Align::Right),
        ("site", Align::Left),
    ]);
    for s in r.sites.iter().take(20) {
        let signed = |d: i64| {
            if d < 0 {
                format!("-{}", bytes(d.unsigned_abs()))
            } else {
                format!("+{}", bytes(d as u64))
            }
        };
        t.row([
            bytes(s.a.bytes_per_window),
            s.a.kind.unwrap_or("-").to_string(),
            bytes(s.b.bytes_per_window),
            s.b.kind.unwrap_or("-").to_string(),
            signed(s.difference),
            s.key.clone(),
        ]);
    }
    o.push_str(&t.render(style));
    o.push('\n');
    let _ = writeln!(o, "{}", style.bold("live at the end, largest differences"));
    let mut t = Table::new(&[
        ("A", Align::Right),
        ("B", Align::Right),
        ("B - A", Align::Right),
        ("site", Align::Left),
    ]);
    for e in r.end_state.iter().take(10) {
        let d = if e.difference < 0 {
            format!("-{}", bytes(e.difference.unsigned_abs()))
        } else {
            format!("+{}", bytes(e.difference as u64))
        };
        t.row([bytes(e.a_bytes), bytes(e.b_bytes), d, e.key.clone()]);
    }
    o.push_str(&t.render(style));
    let _ = writeln!(
        o,
        "\nbackward pass allocations: A {}, B {}",
        bytes(r.a.backward_bytes),
        bytes(r.b.backward_bytes)
    );
    for w in &r.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    o
}
