//! Where windows come from: `record_function` annotations, `user_metadata`, entries into
//! functions, and the function that repeats least often (what `auto` falls back to).

use regex::Regex;

use super::set::Windows;
use crate::attribute::{Attributor, is_python};
use crate::model::fxhash::FastMap;
use crate::model::{Action, Snapshot, flags};

/// Event spans `[START, END)` of the annotations matching `re` on `device` (a START with
/// no END runs to the end of the trace).
pub fn annotation_spans(snap: &Snapshot, device: i64, re: &Regex) -> Vec<(u32, u32)> {
    let trace = snap.trace(device);
    let timed: Vec<(i64, u32)> = (0..trace.len())
        .filter(|&i| snap.meta(trace.meta[i]).has(flags::TIME))
        .map(|i| (trace.time_us[i], i as u32))
        .collect();
    let at = |t: i64| {
        let k = timed.partition_point(|&(ti, _)| ti < t);
        timed.get(k).map_or(trace.len() as u32, |&(_, e)| e)
    };
    let mut open: Vec<(String, u32)> = Vec::new();
    let mut spans = Vec::new();
    for a in snap.external_annotations.iter().flatten() {
        let (Some(name), Some(t)) = (a.name.as_deref(), a.time_us) else {
            continue;
        };
        if a.device.is_some_and(|d| d != device) || !re.is_match(name) {
            continue;
        }
        match a.stage.as_deref() {
            Some("START") => open.push((name.to_string(), at(t))),
            Some("END") => {
                if let Some(i) = open.iter().rposition(|(n, _)| n == name) {
                    let (_, s) = open.remove(i);
                    spans.push((s, at(t)));
                }
            }
            _ => {}
        }
    }
    spans.extend(open.into_iter().map(|(_, s)| (s, trace.len() as u32)));
    spans.sort_unstable();
    spans
}

/// Strips digits so `micro_batch12` and `micro_batch3` fall in one family.
fn family(name: &str) -> String {
    name.chars().filter(|c| !c.is_ascii_digit()).collect()
}

pub(super) fn annotation_windows(
    snap: &Snapshot,
    device: i64,
    pattern: Option<&Regex>,
) -> Option<Windows> {
    let trace = snap.trace(device);
    let anns = snap.external_annotations.as_ref()?;
    let timed: Vec<(i64, u32)> = (0..trace.len())
        .filter(|&i| snap.meta(trace.meta[i]).has(flags::TIME))
        .map(|i| (trace.time_us[i], i as u32))
        .collect();
    if timed.is_empty() {
        return None;
    }
    let starts: Vec<(&str, i64)> = anns
        .iter()
        .filter(|a| a.device.is_none_or(|d| d == device))
        .filter(|a| a.stage.as_deref() == Some("START"))
        .filter_map(|a| Some((a.name.as_deref()?, a.time_us?)))
        .collect();
    let (chosen, reason): (Vec<(&str, i64)>, String) = match pattern {
        Some(re) => (
            starts
                .iter()
                .filter(|(n, _)| re.is_match(n))
                .copied()
                .collect(),
            format!("annotations matching {}", re.as_str()),
        ),
        None => {
            // The repeating family with the most occurrences: the finest unit of work.
            let mut counts: FastMap<String, usize> = FastMap::default();
            for (n, _) in &starts {
                *counts.entry(family(n)).or_default() += 1;
            }
            let mut fams: Vec<(String, usize)> =
                counts.into_iter().filter(|(_, c)| *c >= 3).collect();
            fams.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let (fam, count) = fams.first()?.clone();
            (
                starts
                    .iter()
                    .filter(|(n, _)| family(n) == fam)
                    .copied()
                    .collect(),
                format!("annotation family `{fam}` repeats {count} times, the most of any"),
            )
        }
    };
    if chosen.is_empty() {
        return None;
    }
    // Each START maps to the first event at or after its time.
    let mut ws: Vec<(u32, String)> = Vec::new();
    for (name, t) in chosen {
        let at = timed.partition_point(|&(ti, _)| ti < t);
        if let Some(&(_, ev)) = timed.get(at)
            && ws.last().is_none_or(|(s, _)| *s < ev)
        {
            ws.push((ev, name.to_string()));
        }
    }
    let detail = match pattern {
        Some(re) => re.as_str().to_string(),
        None => ws.first().map(|(_, n)| family(n)).unwrap_or_default(),
    };
    Some(Windows {
        device,
        guessed: false,
        source: "annotation".into(),
        detail,
        reason,
        starts: ws.iter().map(|w| w.0).collect(),
        ends: Vec::new(),
        names: ws.into_iter().map(|w| w.1).collect(),
        events: trace.len() as u32,
    })
}

pub(super) fn metadata_windows(snap: &Snapshot, device: i64) -> Option<Windows> {
    let trace = snap.trace(device);
    let mut starts = Vec::new();
    let mut names = Vec::new();
    let mut last: Option<&str> = None;
    for i in 0..trace.len() {
        let um = snap.meta(trace.meta[i]).user_metadata.as_deref();
        if let Some(u) = um
            && !u.is_empty()
            && last != Some(u)
        {
            starts.push(i as u32);
            names.push(u.to_string());
        }
        if um.is_some_and(|u| !u.is_empty()) {
            last = um;
        }
    }
    (starts.len() >= 2).then(|| Windows {
        device,
        guessed: false,
        source: "metadata".into(),
        detail: "user_metadata".into(),
        reason: format!("user_metadata changes {} times", starts.len()),
        starts,
        ends: Vec::new(),
        names,
        events: trace.len() as u32,
    })
}

/// Entries into functions: for each function name, the allocations whose filtered stack
/// has it while the previous allocation's did not.
fn entries(
    snap: &Snapshot,
    device: i64,
    attr: &Attributor,
    only: Option<&Regex>,
) -> FastMap<String, Vec<u32>> {
    let trace = snap.trace(device);
    let mut out: FastMap<String, Vec<u32>> = FastMap::default();
    let mut prev: Vec<u32> = Vec::new();
    let mut cache: FastMap<crate::model::StackId, Vec<u32>> = FastMap::default();
    for i in 0..trace.len() {
        if trace.action[i] != Action::ALLOC {
            continue;
        }
        let s = trace.stack[i];
        let names = cache
            .entry(s)
            .or_insert_with(|| {
                let mut v: Vec<u32> = attr
                    .filtered(s)
                    .into_iter()
                    .filter(|f| is_python(snap, snap.frames.get(*f)))
                    .map(|f| snap.frames.get(f).name.0)
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            })
            .clone();
        for n in &names {
            if prev.binary_search(n).is_err() {
                let name = snap.strings.get(crate::model::StrId(*n));
                if only.is_none_or(|r| r.is_match(name)) {
                    out.entry(name.to_string()).or_default().push(i as u32);
                }
            }
        }
        prev = names;
    }
    out
}

pub(super) fn frame_windows(
    snap: &Snapshot,
    device: i64,
    attr: &Attributor,
    re: &Regex,
) -> Option<Windows> {
    let ent = entries(snap, device, attr, Some(re));
    let mut starts: Vec<u32> = ent.into_values().flatten().collect();
    starts.sort_unstable();
    starts.dedup();
    (!starts.is_empty()).then(|| Windows {
        device,
        guessed: false,
        source: "frame".into(),
        detail: re.as_str().to_string(),
        reason: format!("entries into a function matching {}", re.as_str()),
        names: vec![String::new(); starts.len()],
        starts,
        ends: Vec::new(),
        events: snap.trace(device).len() as u32,
    })
}

/// The function entered least often but at least four times, most allocations inside
/// on ties: the outermost repeating unit of work that still gives windows to compare.
pub(super) fn period_windows(snap: &Snapshot, device: i64, attr: &Attributor) -> Option<Windows> {
    let ent = entries(snap, device, attr, None);
    let mut cands: Vec<(String, Vec<u32>)> =
        ent.into_iter().filter(|(_, v)| v.len() >= 4).collect();
    // Fewest entries first; then the earliest first entry (an enclosing function is
    // entered before what it calls), then the name for a stable order.
    cands.sort_by(|a, b| {
        a.1.len()
            .cmp(&b.1.len())
            .then(a.1[0].cmp(&b.1[0]))
            .then(a.0.cmp(&b.0))
    });
    let (name, starts) = cands.into_iter().next()?;
    Some(Windows {
        device,
        source: "frame".into(),
        guessed: true,
        detail: format!("^{}$", regex::escape(&name)),
        reason: format!(
            "no repeating annotations or user_metadata; `{name}` is the function entered least often but at least 4 times ({} entries)",
            starts.len()
        ),
        names: vec![String::new(); starts.len()],
        starts,
        ends: Vec::new(),
        events: snap.trace(device).len() as u32,
    })
}
