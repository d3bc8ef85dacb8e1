//! What one pass over a trace counts: events per action, how allocations pair with frees,
//! the time range, and which stacks the events carry. `summary` needs nothing else from the events, so the loader can run
//! this pass on the second core as soon as a long trace is complete (while the rest of
//! the file is parsed) and keep the result with the trace.

use std::sync::OnceLock;

use super::addr_map::AddrMap;
use super::event::{Action, EventMeta, flags};
use super::ids::{MetaId, StackId};

/// The columns a scan reads, borrowed from a trace.
pub struct ScanInput<'a> {
    /// Action per event.
    pub action: &'a [Action],
    /// Address per event.
    pub addr: &'a [u64],
    /// Size per event.
    pub size: &'a [u64],
    /// `time_us` per event.
    pub time_us: &'a [i64],
    /// Meta per event.
    pub meta: &'a [MetaId],
    /// Stack per event.
    pub stack: &'a [StackId],
}

/// The counts of one pass over a trace.
#[derive(Clone, Debug, Default)]
pub struct TraceScan {
    /// Events per action code (index = code; as long as the highest code seen + 1).
    pub actions: Vec<u64>,
    /// `alloc` events at an address already live (the trace lost a free).
    pub double_allocs: u64,
    /// `free_completed` events whose allocation the trace does not hold.
    pub unmatched_frees: u64,
    /// Segment frees/unmaps with no earlier segment alloc/map at that address.
    pub unmatched_segment_frees: u64,
    /// The allocations still open after the last event: address → requested bytes.
    pub open: AddrMap<u64>,
    /// Earliest `time_us` of the events that carry one.
    pub first_time_us: Option<i64>,
    /// Latest `time_us` of the events that carry one.
    pub last_time_us: Option<i64>,
    /// Timed events whose `time_us` is earlier than the previous timed event's.
    pub time_reversals: u64,
    /// The stacks the events carry, as a bit set over stack ids.
    pub stacks_used: Vec<u64>,
}

impl TraceScan {
    /// Scans a trace's columns; `timed[m]` says whether events of meta `m` carry
    /// `time_us` (a meta beyond the slice counts as untimed).
    pub fn of(trace: ScanInput<'_>, timed: &[bool]) -> TraceScan {
        let mut s = TraceScan::default();
        let mut counts = [0u64; 256];
        let mut open_segments: AddrMap<()> = AddrMap::default();
        let (mut lo, mut hi, mut prev) = (i64::MAX, i64::MIN, None::<i64>);
        let events = trace
            .action
            .iter()
            .zip(trace.addr)
            .zip(trace.size)
            .zip(trace.meta.iter().zip(trace.time_us));
        for (((&action, &addr), &size), (&meta, &time)) in events {
            counts[action.0 as usize] += 1;
            match action {
                Action::ALLOC => s.double_allocs += s.open.insert(addr, size).is_some() as u64,
                a if a.frees() => s.unmatched_frees += s.open.remove(addr).is_none() as u64,
                Action::SEGMENT_ALLOC | Action::SEGMENT_MAP => {
                    open_segments.insert(addr, ());
                }
                Action::SEGMENT_FREE | Action::SEGMENT_UNMAP => {
                    s.unmatched_segment_frees += open_segments.remove(addr).is_none() as u64
                }
                _ => {}
            }
            if timed.get(meta.index()).copied().unwrap_or(false) {
                lo = lo.min(time);
                hi = hi.max(time);
                s.time_reversals += prev.is_some_and(|p| time < p) as u64;
                prev = Some(time);
            }
        }
        if prev.is_some() {
            (s.first_time_us, s.last_time_us) = (Some(lo), Some(hi));
        }
        let top = trace.stack.iter().map(|s| s.index()).max().unwrap_or(0);
        s.stacks_used = vec![0u64; top / 64 + 1];
        for st in trace.stack {
            s.stacks_used[st.index() / 64] |= 1 << (st.index() % 64);
        }
        let used = counts.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
        s.actions = counts[..used].to_vec();
        s
    }

    /// Rewrites `stacks_used` through `ids` (old id → new id), for a scan made before the
    /// trace's stack ids were.
    pub fn remap_stacks(&mut self, ids: &[StackId]) {
        let mut out = vec![0u64; ids.iter().map(|s| s.index()).max().unwrap_or(0) / 64 + 1];
        for old in self.used_stacks() {
            let new = ids
                .get(old.index())
                .copied()
                .unwrap_or(StackId::EMPTY)
                .index();
            out[new / 64] |= 1 << (new % 64);
        }
        self.stacks_used = out;
    }

    /// The stacks in `stacks_used`, in id order.
    pub fn used_stacks(&self) -> impl Iterator<Item = StackId> + '_ {
        self.stacks_used
            .iter()
            .enumerate()
            .flat_map(|(w, &word)| {
                let mut bits = word;
                std::iter::from_fn(move || {
                    (bits != 0).then(|| {
                        let b = bits.trailing_zeros();
                        bits &= bits - 1;
                        w * 64 + b as usize
                    })
                })
            })
            .map(|i| StackId(i as u32))
    }

    /// Which metas carry `time_us`, as [`TraceScan::of`] takes it.
    pub fn timed(metas: &[EventMeta]) -> Vec<bool> {
        metas.iter().map(|m| m.has(flags::TIME)).collect()
    }
}

/// A trace's scan, once computed. Not part of the trace's value: equal traces are equal
/// with or without it, and a copy starts without it (so a copy that is then changed can
/// never carry a stale scan).
#[derive(Default)]
pub struct ScanCell(OnceLock<TraceScan>);

impl ScanCell {
    /// The scan, when one was computed.
    pub fn get(&self) -> Option<&TraceScan> {
        self.0.get()
    }

    /// The scan, computed now when there is none.
    pub fn get_or_init(&self, f: impl FnOnce() -> TraceScan) -> &TraceScan {
        self.0.get_or_init(f)
    }

    /// Keeps `scan` (a scan already kept stays).
    pub fn set(&self, scan: TraceScan) {
        let _ = self.0.set(scan);
    }

    /// The scan, to change in place.
    pub fn get_mut(&mut self) -> Option<&mut TraceScan> {
        self.0.get_mut()
    }

    /// Forgets the scan (the trace is about to change).
    pub fn clear(&mut self) {
        self.0.take();
    }
}

impl Clone for ScanCell {
    fn clone(&self) -> Self {
        ScanCell::default()
    }
}

impl PartialEq for ScanCell {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for ScanCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.get().is_some() {
            "ScanCell(kept)"
        } else {
            "ScanCell(none)"
        })
    }
}
