//! The windows in words: what their figures say, why `auto` chose them, what it weighed.

use std::fmt::Write;

use super::{Align, Style, Table, count, per_device, terminal_text};
use crate::report::WindowsReport;
use crate::windows::{Candidate, Failure, Quality, Windows};

/// What a failed check means, in words.
pub fn failure_text(f: &Failure) -> String {
    match *f {
        Failure::TooFew { windows } => {
            format!("{windows} windows: too few to judge growth across (at least 3)")
        }
        Failure::NotCleaningUp { self_freed } => format!(
            "windows look like layers: {:.0}% of the bytes allocated in a window are freed in it (a unit of work frees most)",
            self_freed * 100.0
        ),
        Failure::NotAlike {
            alike_windows,
            alike_events,
        } => format!(
            "windows differ in length: {:.0}% are within 2x of the median, holding {:.0}% of the events",
            alike_windows * 100.0,
            alike_events * 100.0
        ),
        Failure::OnePass {
            last_ratio,
            freed_by_last,
        } => format!(
            "windows are the layers of one pass: the last is {last_ratio:.0}x the typical one and frees {:.0}% of what the others kept (a backward after the forward's layers); one pass gets no verdicts",
            freed_by_last * 100.0
        ),
        Failure::OneBackward => "the stacks show a single backward: these windows are the layers of one pass, which gets no verdicts".to_string(),
        Failure::OneCall => "every allocation from the first window on runs inside one call of a module's forward or an optimizer's step, under which each window starts, and the windows keep memory: they are the layers of a single forward (keeping what they save for a backward the trace does not hold) or the parameters of a single step, which get no verdicts".to_string(),
        Failure::NotSameWork { same_work } => format!(
            "windows do different work: {:.0}% allocate from the same call stacks as a typical one",
            same_work * 100.0
        ),
        Failure::TooShort { median_events } => format!(
            "windows are too short: the typical one holds {median_events} events (a unit of work holds at least 8); the family marks set-up done a few times in a row"
        ),
        Failure::LowCoverage { coverage } => format!(
            "the first window starts late: {:.0}% of the allocations are after it",
            coverage * 100.0
        ),
    }
}

/// A warning for windows used although they fail checks (an explicit `--windows`).
pub fn warning(q: &Quality) -> Option<String> {
    (!q.failed.is_empty()).then(|| {
        let why: Vec<String> = q.failed.iter().map(failure_text).collect();
        format!("these windows may not be units of work: {}", why.join("; "))
    })
}

/// The figures of a family in one line.
pub fn figures(q: &Quality) -> String {
    format!(
        "{:.0}% of a window's bytes freed in it, {:.0}% of windows alike, {:.0}% doing the same work, {:.0}% of allocations covered",
        q.self_freed * 100.0,
        q.alike_windows * 100.0,
        q.same_work * 100.0,
        q.coverage * 100.0
    )
}

/// The candidates `auto` weighed, a table.
pub fn candidates_table(c: &[Candidate], limit: usize, style: Style) -> String {
    let mut t = Table::new(&[
        ("windows", Align::Right),
        ("freed in window", Align::Right),
        ("alike", Align::Right),
        ("same work", Align::Right),
        ("covered", Align::Right),
        ("verdict", Align::Left),
        ("candidate", Align::Left),
    ]);
    let pct = |v: f64| format!("{:.0}%", v * 100.0);
    for x in c.iter().take(limit) {
        let q = &x.quality;
        let verdict = match q.failed.first() {
            None => "unit of work".to_string(),
            Some(Failure::TooFew { .. }) => "too few".into(),
            Some(Failure::NotCleaningUp { .. }) => "keeps memory".into(),
            Some(Failure::NotAlike { .. }) => "unlike".into(),
            Some(Failure::NotSameWork { .. }) => "different work".into(),
            Some(Failure::OnePass { .. } | Failure::OneBackward | Failure::OneCall) => {
                "one pass".into()
            }
            Some(Failure::TooShort { .. }) => "too short".into(),
            Some(Failure::LowCoverage { .. }) => "starts late".into(),
        };
        let full = |v: f64| {
            if q.measured { pct(v) } else { "-".to_string() }
        };
        t.row([
            count(q.windows),
            full(q.self_freed),
            pct(q.alike_windows),
            full(q.same_work),
            pct(q.coverage),
            verdict,
            format!("{} {}", x.source, x.detail),
        ]);
    }
    t.render(style)
}

/// Renders the windows of every device: where they come from, their figures, what else was
/// weighed, and each window's event range.
pub fn text(r: &WindowsReport, style: Style) -> String {
    per_device(&r.file, &r.devices, &r.idle_devices, |w| {
        device_text(w, style)
    })
}

fn device_text(w: &Windows, style: Style) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "device {}: {} windows from {}: {}",
        w.device,
        count(w.len() as u64),
        w.source,
        terminal_text(&w.reason)
    );
    if let Some(q) = &w.quality {
        if w.candidates.is_empty() {
            let _ = writeln!(o, "figures: {}", figures(q));
        }
        if let Some(warn) = warning(q) {
            let _ = writeln!(o, "warning: {warn}");
        }
    }
    if !w.verdicts {
        let _ = writeln!(o, "no per-window verdicts on these windows");
    }
    if let Some(spec) = &w.spec {
        let _ = writeln!(
            o,
            "to ask for them again: --windows '{}'",
            terminal_text(spec)
        );
    }
    if !w.candidates.is_empty() {
        o.push('\n');
        let _ = writeln!(o, "{}", style.bold("candidates weighed"));
        o.push_str(&candidates_table(&w.candidates, 12, style));
        if w.candidates.len() > 12 {
            let _ = writeln!(o, "  ({} more)", w.candidates.len() - 12);
        }
    }
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
            count(e.saturating_sub(s) as u64),
            w.names.get(k).cloned().unwrap_or_default(),
        ]);
    }
    o.push_str(&t.render(style));
    o
}
