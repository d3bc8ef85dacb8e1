//! Trace events as columns: one vector per field, so a replay touches only what it
//! reads and an event costs 33 bytes however many keys its dict had.

use serde::{Deserialize, Serialize};

use super::event::{Action, EventMeta};
use super::ids::{MetaId, StackId};
use super::scan::{ScanCell, ScanInput, TraceScan};

/// One device's trace, oldest event first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// Action code per event.
    pub action: Vec<Action>,
    /// `addr` (or `device_free` for oom events) per event.
    pub addr: Vec<u64>,
    /// `size` per event: requested bytes for alloc and frees, segment bytes for segment events.
    pub size: Vec<u64>,
    /// `time_us` per event (0 where absent; see the meta flags).
    pub time_us: Vec<i64>,
    /// Stack per event ([`StackId::EMPTY`] when `frames` was absent or empty).
    pub stack: Vec<StackId>,
    /// Shared attributes per event, into [`crate::model::Snapshot::metas`].
    pub meta: Vec<MetaId>,
    /// The trace's [`TraceScan`] once computed (see [`Trace::scan`]).
    #[serde(skip)]
    pub scan_cell: ScanCell,
}

/// The events of a trace that carry `time_us`, in event order: where annotations, which
/// have times but no event index, are placed. It borrows the trace's time column and keeps
/// the indices of the timed events only when some events are untimed.
#[derive(Clone, Debug, Default)]
pub struct TimedEvents<'t> {
    times: &'t [i64],
    /// The timed events' indices; `None` when every event is timed.
    index: Option<Vec<u32>>,
}

impl<'t> TimedEvents<'t> {
    /// The timed events of `trace`; `metas` are the snapshot's.
    pub fn of(trace: &'t Trace, metas: &[EventMeta]) -> TimedEvents<'t> {
        let timed: Vec<bool> = metas
            .iter()
            .map(|m| m.has(super::event::flags::TIME))
            .collect();
        let is_timed = |m: &MetaId| timed.get(m.index()).copied().unwrap_or(false);
        let index = if trace.meta.iter().all(is_timed) {
            None
        } else {
            Some(
                (0..trace.len())
                    .filter(|&i| is_timed(&trace.meta[i]))
                    .map(|i| i as u32)
                    .collect(),
            )
        };
        TimedEvents {
            times: &trace.time_us,
            index,
        }
    }

    /// The first timed event at or after `time_us` (`None`: none is).
    pub fn at_or_after(&self, time_us: i64) -> Option<u32> {
        let t = self.times;
        match &self.index {
            None => {
                let k = t.partition_point(|&x| x < time_us);
                (k < t.len()).then_some(k as u32)
            }
            Some(ix) => ix
                .get(ix.partition_point(|&i| t.get(i as usize).is_some_and(|&x| x < time_us)))
                .copied(),
        }
    }
}

impl Trace {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.action.len()
    }

    /// True when the trace holds no event.
    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }

    /// Whether any event has action `a`. It counts rather than stopping at the first
    /// match, because the counting loop is vectorised: on a trace without `a` (the
    /// common case) that is many times faster than a search.
    pub fn has_action(&self, a: Action) -> bool {
        self.action
            .iter()
            .map(|x| (x.0 == a.0) as usize)
            .sum::<usize>()
            > 0
    }

    /// This trace's [`TraceScan`]: the one the loader computed ahead (for long traces, on
    /// the second core), or computed now. `metas` are the snapshot's. A scan describes
    /// the columns as they were when it was computed: [`Trace::push`] forgets it, and
    /// code that writes the columns directly must call [`ScanCell::clear`].
    pub fn scan(&self, metas: &[EventMeta]) -> &TraceScan {
        self.scan_cell
            .get_or_init(|| self.compute_scan(&TraceScan::timed(metas)))
    }

    /// A fresh [`TraceScan`] of the columns; `timed[m]` says whether events of meta `m`
    /// carry `time_us`.
    pub fn compute_scan(&self, timed: &[bool]) -> TraceScan {
        TraceScan::of(
            ScanInput {
                action: &self.action,
                addr: &self.addr,
                size: &self.size,
                time_us: &self.time_us,
                meta: &self.meta,
                stack: &self.stack,
            },
            timed,
        )
    }

    /// Reserves room for `n` more events in every column.
    pub fn reserve(&mut self, n: usize) {
        self.action.reserve(n);
        self.addr.reserve(n);
        self.size.reserve(n);
        self.time_us.reserve(n);
        self.stack.reserve(n);
        self.meta.reserve(n);
    }

    /// Gives back the room reserved past the last event. The loader reserves columns for
    /// as many events as the rest of the file could hold; pages of that room written ahead
    /// (huge pages, pages backed before the parser reached them) stay resident until then.
    pub fn shrink_to_fit(&mut self) {
        self.action.shrink_to_fit();
        self.addr.shrink_to_fit();
        self.size.shrink_to_fit();
        self.time_us.shrink_to_fit();
        self.stack.shrink_to_fit();
        self.meta.shrink_to_fit();
    }

    /// Appends one event.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        action: Action,
        addr: u64,
        size: u64,
        time_us: i64,
        stack: StackId,
        meta: MetaId,
    ) {
        self.scan_cell.clear();
        self.action.push(action);
        self.addr.push(addr);
        self.size.push(size);
        self.time_us.push(time_us);
        self.stack.push(stack);
        self.meta.push(meta);
    }

    pub(crate) fn columns_consistent(&self) -> bool {
        let n = self.action.len();
        self.addr.len() == n
            && self.size.len() == n
            && self.time_us.len() == n
            && self.stack.len() == n
            && self.meta.len() == n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Action;

    /// Stack marks made on tickets follow the tickets to their ids: tickets 1, 5 and 70
    /// become ids 3, 3 (two tickets of one stack) and 1; ticket 0 (unused) would be 0.
    #[test]
    fn stack_marks_follow_the_remap() {
        let mut t = Trace::default();
        for s in [1u32, 5, 70, 5] {
            t.push(
                Action::ALLOC,
                512 * s as u64,
                8,
                0,
                StackId(s),
                crate::model::MetaId(0),
            );
        }
        let mut scan = t.compute_scan(&[]);
        assert_eq!(scan.stacks_used, vec![(1 << 1) | (1 << 5), 1 << 6]);
        let mut ids = vec![StackId(0); 71];
        (ids[1], ids[5], ids[70]) = (StackId(3), StackId(3), StackId(1));
        scan.remap_stacks(&ids);
        assert_eq!(scan.stacks_used, vec![(1 << 1) | (1 << 3)]);
        let used: Vec<StackId> = scan.used_stacks().collect();
        assert_eq!(used, vec![StackId(1), StackId(3)]);
        assert_eq!(scan.actions, vec![4]);
        assert_eq!((scan.double_allocs, scan.open.len()), (1, 3));
    }

    fn trace_timed(times: &[i64], metas: &[u32]) -> Trace {
        let mut t = Trace::default();
        for (&us, &m) in times.iter().zip(metas) {
            t.push(Action::ALLOC, 0, 8, us, StackId(0), crate::model::MetaId(m));
        }
        t
    }

    /// The first timed event at or after a time, with every event timed (the time column
    /// searched in place) and with some untimed (meta 1 has no `time_us`; their 0 must be
    /// skipped): by hand over times 10, 20, 20, 40.
    #[test]
    fn timed_events_find_the_first_at_or_after() {
        let timed = EventMeta {
            flags: super::super::event::flags::TIME,
            ..EventMeta::default()
        };
        let metas = [timed, EventMeta::default()];
        let all = trace_timed(&[10, 20, 20, 40], &[0, 0, 0, 0]);
        let te = TimedEvents::of(&all, &metas);
        assert!(te.index.is_none(), "every event is timed: nothing copied");
        let got: Vec<Option<u32>> = [5, 10, 11, 20, 21, 40, 41]
            .iter()
            .map(|&t| te.at_or_after(t))
            .collect();
        assert_eq!(
            got,
            vec![Some(0), Some(0), Some(1), Some(1), Some(3), Some(3), None]
        );
        // Events 1 and 3 untimed (time 0 in the column): only 0 (10) and 2 (30) count.
        let some = trace_timed(&[10, 0, 30, 0], &[0, 1, 0, 1]);
        let te = TimedEvents::of(&some, &metas);
        let got: Vec<Option<u32>> = [0, 10, 11, 30, 31]
            .iter()
            .map(|&t| te.at_or_after(t))
            .collect();
        assert_eq!(got, vec![Some(0), Some(0), Some(2), Some(2), None]);
        assert_eq!(TimedEvents::default().at_or_after(0), None);
    }

    /// Giving back the reserved room keeps every event and the scan computed before.
    #[test]
    fn shrinking_keeps_the_events_and_the_scan() {
        let mut t = trace_timed(&[1, 2, 3], &[0, 0, 0]);
        t.reserve(1 << 16);
        let before = t.clone();
        t.scan_cell.set(t.compute_scan(&[]));
        t.shrink_to_fit();
        assert_eq!(t.action.capacity(), 3);
        assert_eq!(t.time_us, before.time_us);
        assert_eq!(t.addr, before.addr);
        assert!(t.scan_cell.get().is_some());
    }
}
