//! Terminal rendering of the leak finder's report, the windows, and comparisons.

use std::fmt::Write;

use super::{Align, Style, Table, bytes, count, per_device, signed_bytes, terminal_text};
use crate::analysis::compare::{CompareWarning, DeviceCompare};
use crate::analysis::leaks::NoVerdicts;
use crate::analysis::leaks::{DeviceLeaks, Growth, Kind};
use crate::analysis::top::TopRow;
use crate::attribute::GroupBy;
use crate::report::{CompareReport, LeaksReport};

fn release(g: &Growth, series: bool) -> String {
    match &g.released_at {
        Some(r) => format!(
            "freed from event {} in {} window(s){}",
            r.event_index,
            r.release_windows,
            r.site
                .as_ref()
                .map_or_else(String::new, |s| format!(" by {}", terminal_text(&s.label)))
        ),
        None if g.kind == Kind::Leak && series => "still held in the last file".into(),
        None if g.kind == Kind::Leak => "never freed in the trace".into(),
        None => String::new(),
    }
}

/// Renders the report: per device, suspects, then warm-up and bounded growth.
pub fn text(r: &LeaksReport, style: Style) -> String {
    per_device(&r.file, &r.devices, &r.idle_devices, |d| {
        device_text(d, r.by.unwrap_or_default().name(), style)
    })
}

/// What the trace misses when it wrapped, and what that means for the tables.
const WRAPPED: &str = "the trace misses its start (memory alive when recording began, or a \
                       ring buffer that wrapped): that memory shows as <untraced>";

/// What a window is, in a few words: `units of work (entries into forward_step)`. The
/// search's figures are under `leakscope windows`.
fn windows_unit(w: &crate::analysis::leaks::WindowInfo) -> String {
    use crate::windows::WindowSource;
    match w.source {
        WindowSource::Annotation => format!("{} (annotations)", w.unit),
        WindowSource::Metadata => "values of user_metadata".into(),
        WindowSource::Frame => {
            let function = w.unit.strip_prefix("entry into ").unwrap_or(&w.unit);
            format!("units of work (entries into {function})")
        }
        WindowSource::Site => {
            let site = w.unit.strip_prefix("allocation at ").unwrap_or(&w.unit);
            // Paths make the line long; the file's name and line say where.
            let short = site.rsplit('/').next().unwrap_or(site);
            format!("units of work (allocations at {short})")
        }
        WindowSource::Every => format!("every {}", w.unit),
        WindowSource::Snapshots => "one per snapshot after the first".into(),
        _ => w.unit.clone(),
    }
}

/// What frees that carry their allocations' stacks mean for the verdicts.
const ALLOC_FREE_STACKS: &str = "frees carry their allocations' stacks (recorded with \
                                 context=\"alloc\"): who let go of memory is not read from them";

fn header(r: &DeviceLeaks) -> String {
    let mut wrapped = if r.trace.wrapped {
        format!("\n  {WRAPPED}")
    } else {
        String::new()
    };
    if r.trace.free_stacks == "allocation" {
        wrapped.push_str(&format!("\n  {ALLOC_FREE_STACKS}"));
    }
    if !r.windows.verdicts {
        return format!(
            "device {}: {} events, the whole trace one window{wrapped}\n",
            r.device,
            count(r.trace.events),
        );
    }
    format!(
        "device {}: {} windows: {}, {} events{}{wrapped}\n",
        r.device,
        count(r.windows.count),
        terminal_text(&windows_unit(&r.windows)),
        count(r.trace.events),
        if r.units_differ {
            "; other devices are judged per another unit: their rates are not alike"
        } else {
            ""
        },
    )
}

fn suspects_text(r: &DeviceLeaks, by: &str, style: Style, o: &mut String) {
    let _ = writeln!(o, "{}", style.bold("suspects (memory kept per window)"));
    // Devices judged per different units: each rate says its unit.
    let per = if r.units_differ {
        format!("per window ({})", r.windows.unit)
    } else {
        "per window".to_string()
    };
    let mut t = Table::new(&[
        (per.as_str(), Align::Right),
        ("windows", Align::Right),
        ("since", Align::Right),
        ("held at most", Align::Right),
        ("at end", Align::Right),
        ("kind", Align::Left),
        ("group", Align::Right),
        ("role", Align::Left),
        (by, Align::Left),
    ]);
    for g in &r.suspects {
        t.row([
            bytes(g.bytes_per_window),
            format!("{}/{}", g.windows_growing, g.windows_total),
            g.onset_window.to_string(),
            bytes(g.retained_bytes),
            bytes(g.bytes_at_end),
            g.kind.to_string(),
            g.group.map_or_else(String::new, |x| x.to_string()),
            g.role.clone(),
            g.site.label.clone(),
        ]);
    }
    o.push_str(&t.render(style));
    o.push('\n');
    for g in &r.suspects {
        let rhythm = g.period_windows.map_or_else(String::new, |p| {
            format!("; {} every {p} windows", bytes(g.bytes_per_occurrence))
        });
        let since = match &g.onset_name {
            Some(n) => format!("{} ({})", g.onset_window, terminal_text(n)),
            None => g.onset_window.to_string(),
        };
        let names = if g.names.is_empty() {
            String::new()
        } else {
            format!("; {}", terminal_text(&super::names_text(&g.names)))
        };
        let _ = writeln!(
            o,
            "  {} ({}, since window {since}; {}{names}{rhythm}): {}",
            terminal_text(&g.site.label),
            g.kind,
            g.role,
            release(g, r.windows.is_series())
        );
    }
    for gr in r.groups.iter().filter(|g| g.members.len() > 1) {
        let _ = writeln!(
            o,
            "  group {}: {} sites kept together, {} per window; likely root {}",
            gr.id,
            gr.members.len(),
            bytes(gr.bytes_per_window),
            terminal_text(&gr.root.label)
        );
    }
    for gr in &r.groups {
        let roles: Vec<&str> = gr.roles.iter().map(|x| x.role.as_str()).collect();
        if let Some(meaning) = roles_meaning(&roles) {
            let _ = writeln!(o, "  group {} ({}): {meaning}", gr.id, roles.join(", "));
        }
    }
    // Sites are often a library's frames; the user's own line is one option away.
    if by != GroupBy::User.name() {
        let _ = writeln!(
            o,
            "  --by user names the first frame of your own code for each (where the memory \
             was asked for or kept), --by role what it is"
        );
    }
}

/// What memory of these roles kept per window usually means, and what to do.
pub fn roles_meaning(roles: &[&str]) -> Option<&'static str> {
    let has = |r: &str| roles.contains(&r);
    if has("activation") && has("gradient") {
        Some(
            "activations and gradients kept past their backward: each micro-batch's autograd graph is retained; keep loss.item() / output.detach() (or .cpu()) instead of the tensors, and clear lists that hold them",
        )
    } else if has("activation") {
        Some(
            "activations kept past their forward: a forward's outputs (logits, losses) are kept, with the graph behind them; store .detach()/.item() values and clear lists that hold them",
        )
    } else if has("gradient") {
        Some(
            "gradients kept: .grad tensors not freed between steps; use optimizer.zero_grad(set_to_none=True) and do not keep references to .grad",
        )
    } else if has("optimizer_state") {
        Some(
            "optimizer state growing: parameters added to the optimizer, or a new optimizer made, per step",
        )
    } else if has("parameter") {
        Some(
            "parameters growing: modules built or weights copied (.to(), load_state_dict) per step",
        )
    } else {
        None
    }
}

fn others_text(r: &DeviceLeaks, by: &str, style: Style, o: &mut String) {
    o.push('\n');
    let _ = writeln!(
        o,
        "{}",
        style.bold(
            "not suspects (warm-up, bounded, sporadic, in flight, too late to judge, held until GC)"
        )
    );
    let mut t = Table::new(&[
        ("held at most", Align::Right),
        ("windows", Align::Right),
        ("kind", Align::Left),
        (by, Align::Left),
    ]);
    for g in r.not_suspects.iter().take(10) {
        t.row([
            bytes(g.retained_bytes),
            format!("{}/{}", g.windows_growing, g.windows_total),
            g.kind.to_string(),
            g.site.label.clone(),
        ]);
    }
    o.push_str(&t.render(style));
    if r.not_suspects.len() > 10 {
        let _ = writeln!(o, "  ({} more)", r.not_suspects.len() - 10);
    }
}

/// The advice when there are no per-window verdicts.
pub const HOW_TO_GET_VERDICTS: &str = "to get them, capture several iterations and mark each with torch.profiler.record_function (or torch.cuda.memory._set_memory_metadata), or pass --windows";

fn holders(o: &mut String, title: &str, rows: &[TopRow], by: &str, style: Style) {
    let _ = writeln!(o, "{}", style.bold(title));
    let mut t = Table::new(&[
        ("bytes", Align::Right),
        ("blocks", Align::Right),
        ("role", Align::Left),
        (by, Align::Left),
    ]);
    for row in rows {
        t.row([
            bytes(row.bytes),
            count(row.blocks),
            super::top::role_cell(&row.roles, row.bytes),
            row.site.label.clone(),
        ]);
    }
    o.push_str(&t.render(style));
}

fn no_verdicts_text(r: &DeviceLeaks, nv: &NoVerdicts, by: &str, style: Style, o: &mut String) {
    let _ = writeln!(
        o,
        "{}",
        style.bold("no per-window verdicts: the trace holds no repeated unit of work")
    );
    let _ = writeln!(o, "  {}", terminal_text(&r.windows.reason));
    if r.capture.is_none() {
        let _ = writeln!(o, "  {HOW_TO_GET_VERDICTS}");
    }
    capture_text(r, o);
    o.push('\n');
    let point = |p: &crate::analysis::Point| super::tree::point_text(p);
    if nv.peak.event_index == nv.end.event_index {
        let title = format!(
            "held at the peak, which is the end ({}): {}",
            point(&nv.end),
            bytes(nv.end.requested_bytes)
        );
        holders(o, &title, &nv.at_end, by, style);
        return;
    }
    let title = format!(
        "held at the {}: {}",
        point(&nv.peak),
        bytes(nv.peak.requested_bytes)
    );
    holders(o, &title, &nv.at_peak, by, style);
    o.push('\n');
    let title = format!(
        "held at the {}: {}",
        point(&nv.end),
        bytes(nv.end.requested_bytes)
    );
    holders(o, &title, &nv.at_end, by, style);
}

/// One device's findings.
pub fn device_text(r: &DeviceLeaks, by: &str, style: Style) -> String {
    let mut o = header(r);
    if let Some(warn) = r.windows.quality.as_ref().and_then(super::windows::warning) {
        let _ = writeln!(o, "warning: {warn}");
    }
    o.push('\n');
    if let Some(nv) = &r.no_verdicts {
        no_verdicts_text(r, nv, by, style, &mut o);
        return o;
    }
    if r.suspects.is_empty() {
        let _ = writeln!(
            o,
            "{}",
            style.bold(
                "no site grows in most windows or since a window to the end: no leak suspect"
            )
        );
    } else {
        suspects_text(r, by, style, &mut o);
    }
    if let Some(g) = &r.reserved_growth {
        o.push('\n');
        let _ = writeln!(o, "{}", style.bold(&super::reserved::headline(g)));
        let _ = writeln!(o, "  {}", super::reserved::cause_text(g));
    }
    if let Some(g) = &r.gc_held {
        o.push('\n');
        let _ = writeln!(o, "{}", style.bold(&super::gc_held::headline(g)));
        for line in super::gc_held::sites_text(g) {
            let _ = writeln!(o, "  {line}");
        }
    }
    if !r.not_suspects.is_empty() {
        others_text(r, by, style, &mut o);
    }
    if r.capture.is_some() {
        o.push('\n');
        capture_text(r, &mut o);
    }
    o
}

/// The Python that takes one state-only snapshot per step: what `leaks FILE...` reads.
pub const STATE_SERIES_PYTHON: [&str; 2] = [
    "torch.cuda.memory._record_memory_history(enabled=\"state\")  # once, before the loop",
    "torch.cuda.memory._dump_snapshot(f\"step{step:04d}.pickle\")  # at the end of each step",
];

/// How to capture what shows growth, when this trace cannot.
fn capture_text(r: &DeviceLeaks, o: &mut String) {
    use crate::analysis::capture::Shortfall;
    let Some(c) = &r.capture else {
        return;
    };
    let why = match c.shortfall {
        Shortfall::TooFewWindows => format!(
            "{} window(s) are too few to judge growth (at least {})",
            r.windows.count,
            crate::analysis::capture::TOO_FEW_WINDOWS
        ),
        Shortfall::Wrapped => {
            "the trace misses its start (the ring buffer wrapped or recording began late)".into()
        }
        Shortfall::NoUnit => "no repeated unit of work was found".into(),
        Shortfall::NoTrace => {
            "the file holds state only, no trace: one state shows no change".into()
        }
    };
    let _ = writeln!(o, "  capture: {why}.");
    if let (Some(e), Some(m)) = (c.events_per_window, c.max_entries) {
        let _ = writeln!(
            o,
            "  at this trace's {} events per window, _record_memory_history(max_entries={m}) holds {} windows",
            count(e),
            c.windows_wanted
        );
    } else if c.shortfall != Shortfall::NoTrace {
        let _ = writeln!(o, "  {HOW_TO_GET_VERDICTS}");
    }
    let _ = writeln!(
        o,
        "  or, cheap enough for production: one state-only snapshot per step, then `leakscope leaks step*.pickle`:"
    );
    for line in STATE_SERIES_PYTHON {
        let _ = writeln!(o, "      {line}");
    }
}

/// A comparison warning in words.
pub fn compare_warning(w: &CompareWarning) -> String {
    match w {
        CompareWarning::GradientPathCut {
            backward_drop_percent,
        } => format!(
            "B's backward pass allocates {backward_drop_percent:.0}% less than A's while A's growth is gone: if B is the fix, check that it did not cut the gradient path (a misplaced .detach() stops both the leak and the training)"
        ),
        CompareWarning::WindowCounts { a, b } => format!(
            "the runs have different numbers of windows ({a} and {b}): rates are per window, totals are not comparable"
        ),
    }
}

/// Renders a comparison, device pair by device pair.
pub fn compare_text(r: &CompareReport, style: Style) -> String {
    let mut o = String::new();
    for (i, d) in r.devices.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        o.push_str(&device_compare_text(d, style));
    }
    if r.devices.is_empty() && r.unpaired.is_empty() {
        let _ = writeln!(o, "nothing recorded in either run");
    } else if r.devices.is_empty() {
        let _ = writeln!(o, "no device of A pairs with a device of B");
    }
    for u in &r.unpaired {
        let _ = writeln!(
            o,
            "device {} of {} has no partner in the other run",
            u.device,
            if u.run == "a" { "A" } else { "B" }
        );
    }
    o
}

fn device_compare_text(r: &DeviceCompare, style: Style) -> String {
    let mut o = String::new();
    for (name, s) in [("A", &r.a), ("B", &r.b)] {
        let _ = writeln!(
            o,
            "{name}: {} device {} ({} windows from {})",
            terminal_text(&s.file),
            s.device,
            s.windows.count,
            s.windows.source
        );
    }
    o.push('\n');
    let _ = writeln!(o, "{}", style.bold("growth per window"));
    let mut t = Table::new(&[
        ("A per window", Align::Right),
        ("A kind", Align::Left),
        ("B per window", Align::Right),
        ("B kind", Align::Left),
        ("suspect B - A", Align::Right),
        ("change", Align::Left),
        ("site", Align::Left),
    ]);
    let kind = |k: Option<Kind>| k.map_or_else(|| "-".to_string(), |k| k.to_string());
    for s in r.sites.iter().take(20) {
        t.row([
            bytes(s.a.bytes_per_window),
            kind(s.a.kind),
            bytes(s.b.bytes_per_window),
            kind(s.b.kind),
            signed_bytes(s.difference),
            if s.kind_changed {
                format!("{} -> {}", kind(s.a.kind), kind(s.b.kind))
            } else {
                String::new()
            },
            s.site.label.clone(),
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
        t.row([
            bytes(e.a_bytes),
            bytes(e.b_bytes),
            signed_bytes(e.difference),
            e.site.label.clone(),
        ]);
    }
    o.push_str(&t.render(style));
    let _ = writeln!(
        o,
        "\nbackward pass allocations: A {}, B {}",
        bytes(r.a.backward_bytes),
        bytes(r.b.backward_bytes)
    );
    for w in &r.warnings {
        let _ = writeln!(o, "warning: {}", compare_warning(w));
    }
    o
}
