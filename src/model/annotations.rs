//! `record_function` ranges from `external_annotations`: each START paired with the END
//! of the same name that closes it (the most recent open START of that name, so ranges
//! of one name nest), placed on a device's events where needed. Annotations without a
//! device belong to every device.

use super::Snapshot;
use super::trace::TimedEvents;

/// `name` with each run of digits written `{n}`: the names of one loop's ranges
/// (`micro_batch3`, `micro_batch12`) share it.
///
/// ```
/// assert_eq!(leakscope::model::name_family("micro_batch12"), "micro_batch{n}");
/// ```
pub fn name_family(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !digits {
                out.push_str("{n}");
            }
            digits = true;
        } else {
            digits = false;
            out.push(c);
        }
    }
    out
}

/// One `record_function` range of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationRange<'s> {
    /// The annotation's name.
    pub name: &'s str,
    /// `time_us` of its START.
    pub start_us: i64,
    /// `time_us` of its END, never before the START (`None`: no END before the snapshot
    /// was taken).
    pub end_us: Option<i64>,
}

/// The ranges of `device`: closed ones in the order their END came, then the open ones.
///
/// ```
/// let snap = leakscope::model::Snapshot::default();
/// assert!(leakscope::model::annotation_ranges(&snap, 0).is_empty());
/// ```
pub fn annotation_ranges(snap: &Snapshot, device: i64) -> Vec<AnnotationRange<'_>> {
    let mut open: Vec<(&str, i64)> = Vec::new();
    let mut out = Vec::new();
    for a in snap.external_annotations.iter().flatten() {
        let (Some(name), Some(t)) = (a.name.as_deref(), a.time_us) else {
            continue;
        };
        if a.device.is_some_and(|d| d != device) {
            continue;
        }
        match a.stage.as_deref() {
            Some("START") => open.push((name, t)),
            Some("END") => {
                if let Some(i) = open.iter().rposition(|(n, _)| *n == name) {
                    let (_, s) = open.remove(i);
                    out.push(AnnotationRange {
                        name,
                        start_us: s,
                        end_us: Some(t.max(s)),
                    });
                }
            }
            _ => {}
        }
    }
    out.extend(open.into_iter().map(|(name, s)| AnnotationRange {
        name,
        start_us: s,
        end_us: None,
    }));
    out
}

/// A `record_function` range placed on a device's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRange<'s> {
    /// The annotation's name.
    pub name: &'s str,
    /// The first event at or after its START.
    pub start: u32,
    /// The first event at or after its END (the trace's length when none is, or when it
    /// never closed).
    pub end: u32,
    /// Whether an END closed it.
    pub closed: bool,
}

/// The ranges of `device` as event spans `[start, end)` of its trace, sorted by start,
/// the longer first at equal starts (so a range comes before those inside it): a time
/// maps to the first timed event at or after it.
pub fn annotation_event_ranges(snap: &Snapshot, device: i64) -> Vec<EventRange<'_>> {
    let trace = snap.trace(device);
    let timed = TimedEvents::of(trace, &snap.metas);
    let n = trace.len() as u32;
    let at = |t: i64| timed.at_or_after(t).unwrap_or(n);
    let mut spans: Vec<EventRange<'_>> = annotation_ranges(snap, device)
        .into_iter()
        .map(|r| EventRange {
            name: r.name,
            start: at(r.start_us),
            end: r.end_us.map_or(n, at),
            closed: r.end_us.is_some(),
        })
        .collect();
    spans.sort_unstable_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    spans
}
