//! Terminal rendering of [`CompareAtReport`]: per device pair, the two points and the
//! sites whose memory there changed most, with what the rest adds up to.

use std::fmt::Write;

use super::{Align, Style, Table, bytes, signed_bytes, terminal_text};
use crate::analysis::point_diff::DevicePointDiff;
use crate::report::{CompareAtReport, CompareStepsReport};

/// Rows shown per device pair.
const ROWS: usize = 25;

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
    // Where the largest changes were allocated (the run that holds more of each).
    for r in d
        .rows
        .iter()
        .filter(|r| !r.stack.is_empty() && r.difference != 0)
    {
        let _ = writeln!(
            o,
            "\n  {} {} ({} in {}); its largest allocation there was made at:",
            signed_bytes(r.difference),
            terminal_text(&r.site.label),
            bytes(r.a_bytes.max(r.b_bytes)),
            if r.difference > 0 { "B" } else { "A" }
        );
        for f in r.stack.iter().take(STACK_FRAMES) {
            let _ = writeln!(o, "      {}", terminal_text(f));
        }
        if r.stack.len() > STACK_FRAMES {
            let _ = writeln!(o, "      ({} more frames)", r.stack.len() - STACK_FRAMES);
        }
    }
}

/// Frames shown of each stack (innermost first); `--json` has them all.
const STACK_FRAMES: usize = 12;

/// Two run directories step by step: one line per rank, step and device (the two
/// points, the difference, the largest change), then the files found in one run only.
pub fn steps_text(r: &CompareStepsReport, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "A: {}\nB: {}\nat: {}\n", r.a, r.b, r.at);
    let mut t = Table::new(&[
        ("step", Align::Left),
        ("rank", Align::Right),
        ("device", Align::Right),
        ("A", Align::Right),
        ("B", Align::Right),
        ("difference", Align::Right),
        ("largest change", Align::Right),
        ("at", Align::Left),
    ]);
    for p in &r.steps {
        let rank = p.rank.map_or_else(|| "-".into(), |v| v.to_string());
        if let Some(e) = &p.error {
            t.row(super::ranks::error_row(
                vec![super::ranks::step_cell(&p.step), rank],
                8,
                e,
            ));
            continue;
        }
        for d in &p.compare.devices {
            let top = d.rows.first().filter(|x| x.difference != 0);
            t.row([
                super::ranks::step_cell(&p.step),
                rank.clone(),
                d.device_b.to_string(),
                bytes(d.a_total),
                bytes(d.b_total),
                signed_bytes(d.difference),
                top.map_or_else(String::new, |x| signed_bytes(x.difference)),
                top.map_or_else(String::new, |x| x.site.label.clone()),
            ]);
        }
    }
    o.push_str(&t.render(style));
    for u in &r.unpaired {
        let _ = writeln!(o, "in one run only: {}", terminal_text(u));
    }
    o
}
