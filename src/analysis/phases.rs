//! Memory per annotated phase: for each `record_function` range of a device, the live
//! bytes when it starts, at its highest and when it ends (Mosaic's per-annotation-stage
//! usage), and per family of names (`micro_batch3` and `micro_batch12` are
//! `micro_batch{n}`) the same over all its ranges.
//!
//! A range covers the events from the first at or after its START time up to (not
//! including) the first at or after its END time, as windows place annotations; "bytes when
//! it starts" are the live requested bytes after every event before it.

use serde::Serialize;

use crate::model::{Snapshot, TimedEvents, annotation_ranges, name_family as family};
use crate::replay::Replay;

/// One `record_function` range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Phase {
    /// The annotation's name.
    pub name: String,
    /// How many ranges enclose it.
    pub depth: u32,
    /// `time_us` of its START.
    pub start_time_us: i64,
    /// `time_us` of its END (`null`: it never closed).
    pub end_time_us: Option<i64>,
    /// The first event inside it (the trace's length when none is).
    pub start_event: u32,
    /// The first event after it (the trace's length when it runs to the end).
    pub end_event: u32,
    /// Live requested bytes when it starts.
    pub start_bytes: u64,
    /// The most live bytes while it ran (at least `start_bytes`).
    pub peak_bytes: u64,
    /// The event after which that most was first reached (`null`: at its start).
    pub peak_event: Option<u32>,
    /// Live bytes when it ends.
    pub end_bytes: u64,
}

impl Phase {
    /// What it left live beyond what it found (negative when it freed more).
    pub fn growth(&self) -> i128 {
        i128::from(self.end_bytes) - i128::from(self.start_bytes)
    }
}

/// Every range of one family of names, summed up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PhaseName {
    /// The names' family: each run of digits written `{n}` (`micro_batch{n}`).
    pub name: String,
    /// Its ranges.
    pub count: u64,
    /// The most live bytes during any of them.
    pub peak_bytes: u64,
    /// The most any of them rose above its start (peak minus start).
    pub max_rise_bytes: u64,
    /// What they left live beyond what they found, summed (negative: freed more).
    pub growth_bytes: i64,
    /// How many of them ended with more live than they started with.
    pub grew: u64,
}

/// The phases of one device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DevicePhases {
    /// Device index.
    pub device: i64,
    /// Each range, in START order.
    pub phases: Vec<Phase>,
    /// Each family of names once, in order of first START.
    pub names: Vec<PhaseName>,
}

/// A range-maximum index over the live bytes after each event: the first event of a span
/// holding the span's most, in `O(log n)`.
struct MaxIndex<'a> {
    values: &'a [u64],
    /// A bottom-up segment tree of event indices, leaves at `size..`.
    tree: Vec<u32>,
    size: usize,
}

impl<'a> MaxIndex<'a> {
    fn new(values: &'a [u64]) -> MaxIndex<'a> {
        let size = values.len().next_power_of_two().max(1);
        let mut tree = vec![u32::MAX; 2 * size];
        for i in 0..values.len() {
            tree[size + i] = i as u32;
        }
        let mut m = MaxIndex { values, tree, size };
        for n in (1..size).rev() {
            m.tree[n] = m.better(m.tree[2 * n], m.tree[2 * n + 1]);
        }
        m
    }

    /// The higher of two events' bytes, the earlier on a tie (`u32::MAX`: none).
    fn better(&self, a: u32, b: u32) -> u32 {
        match (a, b) {
            (u32::MAX, x) | (x, u32::MAX) => x,
            _ => {
                let (va, vb) = (self.values[a as usize], self.values[b as usize]);
                if vb > va || (vb == va && b < a) { b } else { a }
            }
        }
    }

    /// The first event of `[lo, hi)` with the most bytes, `None` when it is empty.
    fn argmax(&self, lo: usize, hi: usize) -> Option<u32> {
        let (mut l, mut r) = (lo + self.size, hi.min(self.values.len()) + self.size);
        let mut best = u32::MAX;
        while l < r {
            if l & 1 == 1 {
                best = self.better(best, self.tree[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                best = self.better(best, self.tree[r]);
            }
            l /= 2;
            r /= 2;
        }
        (best != u32::MAX).then_some(best)
    }
}

/// The phases of `device` (`replay` is its replay).
///
/// ```
/// let snap = leakscope::model::Snapshot::default();
/// let replay = leakscope::replay::Replay::default();
/// assert!(leakscope::analysis::phases::phases(&snap, 0, &replay).phases.is_empty());
/// ```
pub fn phases(snap: &Snapshot, device: i64, replay: &Replay) -> DevicePhases {
    let trace = snap.trace(device);
    let timed = TimedEvents::of(trace, &snap.metas);
    let n = replay.len() as u32;
    let at = |t: i64| timed.at_or_after(t).unwrap_or(n);
    let mut ranges = annotation_ranges(snap, device);
    // START order; a range before those inside it.
    ranges.sort_by_key(|r| (r.start_us, std::cmp::Reverse(r.end_us.unwrap_or(i64::MAX))));
    let max = MaxIndex::new(&replay.requested);
    let before = |e: u32| replay.requested_after(e.checked_sub(1));
    let mut open_ends: Vec<u32> = Vec::new();
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let (start, end) = (at(r.start_us), r.end_us.map_or(n, at));
        while open_ends.last().is_some_and(|&e| e <= start && e < n) {
            open_ends.pop();
        }
        let depth = open_ends.len() as u32;
        open_ends.push(end);
        let start_bytes = before(start);
        let (peak_event, peak_bytes) = match max.argmax(start as usize, end as usize) {
            Some(e) if replay.requested[e as usize] > start_bytes => {
                (Some(e), replay.requested[e as usize])
            }
            _ => (None, start_bytes),
        };
        out.push(Phase {
            name: r.name.to_string(),
            depth,
            start_time_us: r.start_us,
            end_time_us: r.end_us,
            start_event: start,
            end_event: end,
            start_bytes,
            peak_bytes,
            peak_event,
            end_bytes: before(end),
        });
    }
    let names = by_name(&out);
    DevicePhases {
        device,
        phases: out,
        names,
    }
}

fn by_name(phases: &[Phase]) -> Vec<PhaseName> {
    let mut names: Vec<PhaseName> = Vec::new();
    let mut index: crate::model::fxhash::FastMap<&str, usize> = Default::default();
    let families: Vec<String> = phases.iter().map(|p| family(&p.name)).collect();
    for (p, fam) in phases.iter().zip(&families) {
        let i = *index.entry(fam.as_str()).or_insert_with(|| {
            names.push(PhaseName {
                name: fam.clone(),
                count: 0,
                peak_bytes: 0,
                max_rise_bytes: 0,
                growth_bytes: 0,
                grew: 0,
            });
            names.len() - 1
        });
        let s = &mut names[i];
        s.count += 1;
        s.peak_bytes = s.peak_bytes.max(p.peak_bytes);
        s.max_rise_bytes = s.max_rise_bytes.max(p.peak_bytes - p.start_bytes);
        let g = p.growth().clamp(i64::MIN.into(), i64::MAX.into()) as i64;
        s.growth_bytes = s.growth_bytes.saturating_add(g);
        s.grew += u64::from(g > 0);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_write_digit_runs_as_n() {
        assert_eq!(family("micro_batch12"), "micro_batch{n}");
        assert_eq!(family("layer3.attn0"), "layer{n}.attn{n}");
        assert_eq!(
            family("Optimizer.step#AdamW.step"),
            "Optimizer.step#AdamW.step"
        );
    }

    #[test]
    fn argmax_finds_the_first_highest_event_of_a_span() {
        let v = [1, 5, 3, 5, 2, 9, 0];
        let m = MaxIndex::new(&v);
        for lo in 0..v.len() {
            for hi in lo..=v.len() {
                let want = (lo..hi).fold(None, |b: Option<usize>, i| match b {
                    Some(j) if v[j] >= v[i] => Some(j),
                    _ => Some(i),
                });
                assert_eq!(m.argmax(lo, hi), want.map(|i| i as u32), "[{lo}, {hi})");
            }
        }
    }
}
