//! Allocation lifetimes and the memory timeline of one device.
//!
//! Memory counts from `alloc` until `free_completed` (or an older trace's `free`), as
//! PyTorch's `requested_bytes` counts it: between `free_requested` and `free_completed` a
//! block waits for other streams (`active_pending_free`) and is still held. Bytes are the
//! bytes the program requested (trace events carry them; a block alive at the end weighs
//! its `requested_size`). Allocations the trace cannot see are reconstructed: an active
//! block of the final segments that no live `alloc` accounts for, and a `free_completed`
//! with no `alloc`. Each holds its address from the start of the trace, unless the trace
//! shows the address held by someone else earlier: then it began after the last event that
//! freed that address (an address holds one allocation at a time, so it is counted once).

use crate::model::addr_map::AddrMap;
use crate::model::fxhash::FastMap;
use crate::model::size::{MAX_COUNTED, counted};
use crate::model::{Action, Block, DeviceView, StackId, TraceScan};

/// Where a lifetime's allocation comes from. A reconstructed allocation carries the last
/// event before it that freed its address (it began after that event); `None`: held from
/// the start of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// An `alloc` event of the trace (its index).
    Traced(u32),
    /// A block alive at the end with no `alloc` in the trace.
    PreTraceBlock {
        /// The last event before it that freed its address.
        born_after: Option<u32>,
    },
    /// A `free_completed` (or `free_requested`) whose `alloc` is not in the trace.
    UnmatchedFree {
        /// The last event before it that freed its address.
        born_after: Option<u32>,
    },
}

/// One allocation from birth to its `free_completed`. A replay keeps one per allocation
/// (hundreds of thousands per device), so it holds only what the analyses read and
/// cannot find in the trace: 48 bytes. The stack of the event that freed it is the
/// trace's ([`Lifetime::free_stack`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// Block address.
    pub addr: u64,
    /// Requested bytes (at most [`MAX_COUNTED`], as the timeline counts them).
    pub bytes: u64,
    /// Where it comes from.
    pub origin: Origin,
    /// `free_requested` event, if any.
    pub free_requested: Option<u32>,
    /// `free_completed` event, or `None` when alive at the end.
    pub freed: Option<u32>,
    /// Stack of the allocation (for reconstructed ones: the block's or the free's frames).
    pub stack: StackId,
}

const _: () = assert!(std::mem::size_of::<Lifetime>() == 48);

impl Lifetime {
    /// The first event after which the allocation holds memory (`None`: it does before
    /// the first event).
    #[inline]
    pub fn first_alive(&self) -> Option<u32> {
        match self.origin {
            Origin::Traced(a) => Some(a),
            _ => self.born_after().map(|j| j.saturating_add(1)),
        }
    }

    /// The `alloc` event of a traced allocation (`None`: reconstructed).
    #[inline]
    pub fn traced_birth(&self) -> Option<u32> {
        match self.origin {
            Origin::Traced(a) => Some(a),
            _ => None,
        }
    }

    /// For a reconstructed allocation: the last event before it that freed its address
    /// (it began after that event); `None`: held from the start of the trace, or traced.
    pub fn born_after(&self) -> Option<u32> {
        match self.origin {
            Origin::Traced(_) => None,
            Origin::PreTraceBlock { born_after } | Origin::UnmatchedFree { born_after } => {
                born_after
            }
        }
    }

    /// The stack of the event that freed it, when a free event of `trace` (its device's)
    /// did (an allocation closed by a second `alloc` at its address has none).
    pub fn free_stack(&self, trace: &crate::model::Trace) -> Option<StackId> {
        let f = self.freed? as usize;
        trace
            .action
            .get(f)
            .is_some_and(|a| a.frees())
            .then(|| trace.stack.get(f).copied())
            .flatten()
    }

    /// Whether the allocation holds memory after event `i` (`None`: before any event).
    #[inline]
    pub fn alive_after(&self, i: Option<u32>) -> bool {
        let born = match (self.first_alive(), i) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(i)) => a <= i,
        };
        born && self.freed.is_none_or(|f| i.is_none_or(|i| f > i))
    }

    /// Whether it waits for other streams after event `i` (freed by the program, not yet
    /// returned to the allocator): `active_pending_free`.
    #[inline]
    pub fn pending_after(&self, i: Option<u32>) -> bool {
        self.alive_after(i)
            && self
                .free_requested
                .is_some_and(|r| i.is_some_and(|i| r <= i))
    }

    /// Whether it was allocated before the trace began.
    pub fn before_trace(&self) -> bool {
        !matches!(self.origin, Origin::Traced(_))
    }
}

/// A difference between the replayed end state and the final `segments`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// The replay ends with an allocation at this address but no active block starts there.
    NoBlock {
        /// Address.
        addr: u64,
        /// The `alloc` event.
        event: u32,
    },
    /// A block is active at this address but its requested size differs from the replay's.
    Size {
        /// Address.
        addr: u64,
        /// Requested bytes per the trace.
        traced: u64,
        /// `requested_size` of the block.
        block: u64,
    },
}

/// The replay of one device.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// Device index.
    pub device: i64,
    /// Every allocation, traced ones in `alloc` order, reconstructed ones after.
    pub lifetimes: Vec<Lifetime>,
    /// Live (requested) bytes before the first event.
    pub initial_requested: u64,
    /// Reserved bytes before the first event.
    pub initial_reserved: u64,
    /// Live bytes after each event.
    pub requested: Vec<u64>,
    /// Reserved bytes after each event.
    pub reserved: Vec<u64>,
    /// Active blocks of the final segments allocated before the trace began.
    pub pre_trace_blocks: u64,
    /// Frees whose allocation is not in the trace.
    pub unmatched_frees: u64,
    /// `segment_free`/`segment_unmap` with no earlier `segment_alloc`/`segment_map` at
    /// that address.
    pub unmatched_segment_frees: u64,
    /// `alloc` at an address already live (the earlier allocation is closed there).
    pub double_allocs: u64,
    /// `free_requested` with no live allocation at its address.
    pub stray_free_requests: u64,
    /// Points (before the first event, after each) at which the bytes requested exceed
    /// the bytes reserved.
    pub requested_above_reserved: u64,
    /// Points at which the reserved bytes, counted back from the final segments, would be
    /// negative (shown as 0).
    pub negative_reserved: u64,
    /// Differences between the replayed end state and `segments`.
    pub mismatches: Vec<Mismatch>,
    /// Indices of `oom` events.
    pub ooms: Vec<u32>,
    /// Sizes no allocator has (2^63 bytes or more, counted as [`MAX_COUNTED`]) and
    /// points at which the live or reserved bytes pass what the counts hold (stopped at
    /// the top): the figures near them are bounds, not measurements.
    pub impossible_sizes: u64,
}

impl Replay {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.requested.len()
    }

    /// True when the device has no trace events.
    pub fn is_empty(&self) -> bool {
        self.requested.is_empty()
    }

    /// The peak of live bytes: the first event after which they are highest, with the
    /// bytes (`None` as index: before any event, when nothing in the trace exceeds the start).
    pub fn peak(&self) -> (Option<u32>, u64) {
        let mut best = (None, self.initial_requested);
        for (i, &v) in self.requested.iter().enumerate() {
            if v > best.1 {
                best = (Some(i as u32), v);
            }
        }
        best
    }

    /// The most bytes reserved before the first event or after any.
    pub fn peak_reserved(&self) -> u64 {
        self.reserved
            .iter()
            .copied()
            .fold(self.initial_reserved, u64::max)
    }

    /// Live bytes after event `i` (`None`: before the first event).
    pub fn requested_after(&self, i: Option<u32>) -> u64 {
        match i {
            Some(i) => self
                .requested
                .get(i as usize)
                .copied()
                .unwrap_or(self.initial_requested),
            None => self.initial_requested,
        }
    }

    /// The last event index, `None` when the trace is empty.
    pub fn last_event(&self) -> Option<u32> {
        self.requested.len().checked_sub(1).map(|i| i as u32)
    }

    /// Allocations alive after event `i`.
    pub fn live_set(&self, i: Option<u32>) -> impl Iterator<Item = &Lifetime> {
        self.lifetimes.iter().filter(move |l| l.alive_after(i))
    }

    /// Indices (into [`Replay::lifetimes`]) of the allocations alive after event `i`.
    pub fn live_indices(&self, i: Option<u32>) -> impl Iterator<Item = usize> + '_ {
        self.lifetimes
            .iter()
            .enumerate()
            .filter(move |(_, l)| l.alive_after(i))
            .map(|(k, _)| k)
    }
}

/// The stack a block was allocated at: its `frames`, else its first history entry's.
pub fn block_stack(b: &Block) -> StackId {
    b.stack
        .filter(|s| *s != StackId::EMPTY)
        .or_else(|| {
            b.history
                .as_ref()
                .and_then(|h| h.first())
                .and_then(|h| h.stack)
        })
        .unwrap_or(StackId::EMPTY)
}

fn block_requested(b: &Block) -> u64 {
    b.requested_size.unwrap_or(b.size)
}

/// How completely a trace covers its device: the counts of [`replay`] that `summary`
/// reports, without lifetimes or timelines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Active blocks of the final segments allocated before the trace began.
    pub pre_trace_blocks: u64,
    /// Frees whose allocation is not in the trace.
    pub unmatched_frees: u64,
    /// Segment frees/unmaps with no earlier segment alloc/map at that address.
    pub unmatched_segment_frees: u64,
    /// `alloc` at an address already live.
    pub double_allocs: u64,
    /// Differences between the replayed end state and `segments`.
    pub mismatches: u64,
}

/// The counts of [`replay`] alone. It keeps only the live addresses (a map of the
/// allocations open now), not a record per allocation, so it costs a fraction of it.
/// Uses the trace's kept [`TraceScan`] when there is one.
pub fn coverage(dev: &DeviceView) -> Coverage {
    match dev.trace.scan_cell.get() {
        Some(scan) => coverage_of(dev, scan),
        None => coverage_of(dev, &dev.trace.compute_scan(&[])),
    }
}

/// [`coverage`] from a scan of the device's trace.
pub fn coverage_of(dev: &DeviceView, scan: &TraceScan) -> Coverage {
    let mut c = Coverage {
        unmatched_frees: scan.unmatched_frees,
        unmatched_segment_frees: scan.unmatched_segment_frees,
        double_allocs: scan.double_allocs,
        ..Coverage::default()
    };
    let mut blocks: FastMap<u64, u64> = FastMap::default();
    for b in dev.segments.iter().flat_map(|s| &s.blocks) {
        if b.state.is_active() {
            blocks.insert(b.address, block_requested(b));
            if !scan.open.contains_key(b.address) {
                c.pre_trace_blocks += 1;
            }
        }
    }
    c.mismatches = scan
        .open
        .iter()
        .filter(|(addr, bytes)| blocks.get(addr) != Some(bytes))
        .count() as u64;
    c
}

/// A size as a lifetime holds it: at most [`MAX_COUNTED`], counting the sizes cut down,
/// so that the timeline (a signed running sum) and the lifetimes alive at a point always
/// add up to the same bytes.
fn capped(size: u64, impossible: &mut u64) -> u64 {
    *impossible += u64::from(size > MAX_COUNTED);
    size.min(MAX_COUNTED)
}

/// Replays the trace of `dev` against its final segments.
pub fn replay(dev: &DeviceView) -> Replay {
    let t = dev.trace;
    let n = t.len();
    let mut r = Replay {
        device: dev.device,
        ..Default::default()
    };
    // addr -> index in lifetimes of the allocation currently holding it
    let mut open: AddrMap<usize> = AddrMap::default();
    // addr -> the last event that freed it (its holder ended there)
    let mut last_end: AddrMap<u32> = AddrMap::default();
    let mut open_segments: AddrMap<()> = AddrMap::default();
    // addr -> a `free_requested` no traced allocation accounts for (yet)
    let mut requests: AddrMap<u32> = AddrMap::default();
    let mut unmatched: Vec<Lifetime> = Vec::new();
    // The change of reserved bytes at each event, and all of them together (wide: a
    // hostile file's sum of sizes can pass 64 bits).
    let mut reserved_total: i128 = 0;
    let mut reserved_delta: Vec<i64> = Vec::with_capacity(n);
    // The change of requested bytes at each event, for the traced allocations (written in
    // event order here, rather than scattered over the timeline afterwards).
    let mut requested_delta: Vec<i64> = Vec::with_capacity(n);
    // One lifetime per alloc, plus those the trace does not show being made: at most one
    // per unmatched free and one per active block of the final segments. Reserving them
    // all now spares a copy of the whole vector when they are added at the end. (The
    // counts come from the loader's scan when it kept one, else from a counting pass.)
    let (allocs, unmatched_frees) = match t.scan_cell.get() {
        Some(s) => (
            s.actions
                .get(Action::ALLOC.0 as usize)
                .copied()
                .unwrap_or(0),
            s.unmatched_frees,
        ),
        None => (
            t.action.iter().filter(|a| **a == Action::ALLOC).count() as u64,
            t.action.iter().filter(|a| a.frees()).count() as u64,
        ),
    };
    let active_blocks = dev
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state.is_active())
        .count() as u64;
    r.lifetimes.reserve(
        (allocs + unmatched_frees)
            .min(n as u64)
            .saturating_add(active_blocks) as usize,
    );
    for i in 0..n {
        let addr = t.addr[i];
        let size = t.size[i];
        let at = i as u32;
        let mut delta: i64 = 0;
        let mut seg_delta: i64 = 0;
        match t.action[i] {
            Action::ALLOC => {
                if let Some(prev) = open.remove(addr) {
                    // A second alloc at a live address: the trace lost the free.
                    r.double_allocs += 1;
                    r.lifetimes[prev].freed = Some(at);
                    delta -= counted(r.lifetimes[prev].bytes);
                }
                let bytes = capped(size, &mut r.impossible_sizes);
                // Both terms are within ±MAX_COUNTED: the difference cannot wrap.
                delta += counted(bytes);
                open.insert(addr, r.lifetimes.len());
                r.lifetimes.push(Lifetime {
                    addr,
                    bytes,
                    origin: Origin::Traced(at),
                    free_requested: None,
                    freed: None,
                    stack: t.stack[i],
                });
            }
            Action::FREE_REQUESTED => match open.get(addr) {
                Some(k) => {
                    r.lifetimes[k].free_requested.get_or_insert(at);
                }
                // An allocation the trace did not show: its free completes later (an
                // unmatched free), or it is pending at the end; else the request is stray.
                None => {
                    requests.insert(addr, at);
                }
            },
            a if a.frees() => {
                match open.remove(addr) {
                    Some(k) => {
                        let l = &mut r.lifetimes[k];
                        l.freed = Some(at);
                        delta = -counted(l.bytes);
                    }
                    None => {
                        r.unmatched_frees += 1;
                        unmatched.push(Lifetime {
                            addr,
                            bytes: capped(size, &mut r.impossible_sizes),
                            origin: Origin::UnmatchedFree {
                                born_after: last_end.get(addr),
                            },
                            free_requested: requests.remove(addr),
                            freed: Some(at),
                            stack: t.stack[i],
                        });
                    }
                }
                last_end.insert(addr, at);
            }
            Action::SEGMENT_ALLOC | Action::SEGMENT_MAP => {
                open_segments.insert(addr, ());
                seg_delta = counted(capped(size, &mut r.impossible_sizes));
            }
            Action::SEGMENT_FREE | Action::SEGMENT_UNMAP => {
                if open_segments.remove(addr).is_none() {
                    r.unmatched_segment_frees += 1;
                }
                seg_delta = -counted(capped(size, &mut r.impossible_sizes));
            }
            Action::OOM => r.ooms.push(at),
            _ => {}
        }
        reserved_total += i128::from(seg_delta);
        reserved_delta.push(seg_delta);
        requested_delta.push(delta);
    }
    let traced = r.lifetimes.len();
    let pre_trace = reconcile(dev, &mut r, &open, &last_end, &mut requests);
    r.stray_free_requests = requests.len() as u64;
    r.pre_trace_blocks = pre_trace.len() as u64;
    r.lifetimes.extend(pre_trace);
    r.lifetimes.extend(unmatched);
    timelines(
        dev,
        &mut r,
        traced,
        requested_delta,
        reserved_delta,
        reserved_total,
    );
    r
}

/// Compares what the replay leaves open with the final segments, and returns the active
/// blocks no open allocation accounts for (allocated before the trace, or after the last
/// event that freed their address).
fn reconcile(
    dev: &DeviceView,
    r: &mut Replay,
    open: &AddrMap<usize>,
    last_end: &AddrMap<u32>,
    requests: &mut AddrMap<u32>,
) -> Vec<Lifetime> {
    let mut blocks: FastMap<u64, &Block> = FastMap::default();
    let mut pre_trace = Vec::new();
    for b in dev.segments.iter().flat_map(|s| &s.blocks) {
        if !b.state.is_active() {
            continue;
        }
        blocks.insert(b.address, b);
        if !open.contains_key(b.address) {
            // A block pending its free at the end takes the request the trace shows.
            let pending = !matches!(b.state, crate::model::BlockState::ActiveAllocated);
            pre_trace.push(Lifetime {
                addr: b.address,
                bytes: capped(block_requested(b), &mut r.impossible_sizes),
                origin: Origin::PreTraceBlock {
                    born_after: last_end.get(b.address),
                },
                free_requested: if pending {
                    requests.remove(b.address)
                } else {
                    None
                },
                freed: None,
                stack: block_stack(b),
            });
        }
    }
    let mut open_sorted: Vec<usize> = open.iter().map(|(_, k)| k).collect();
    open_sorted.sort_unstable();
    for k in open_sorted {
        let l = &r.lifetimes[k];
        let Origin::Traced(ev) = l.origin else {
            continue;
        };
        match blocks.get(&l.addr) {
            None => r.mismatches.push(Mismatch::NoBlock {
                addr: l.addr,
                event: ev,
            }),
            // The lifetime holds the size as counted: so is the block's compared.
            Some(b) if block_requested(b).min(MAX_COUNTED) != l.bytes => {
                r.mismatches.push(Mismatch::Size {
                    addr: l.addr,
                    traced: l.bytes,
                    block: block_requested(b),
                })
            }
            Some(_) => {}
        }
    }
    pre_trace
}

/// The requested and reserved bytes before the first event and after each. The traced
/// allocations' changes per event come from the replay's pass (`live`); the
/// reconstructed lifetimes (from index `traced` on) add their bytes where they are first
/// alive and take them away where they are freed; reserved counts back from the final
/// segments by the changes per event (`reserved`, `reserved_total` their sum). Running
/// sums are wide, so only a point whose bytes pass 64 bits is cut (to `u64::MAX`, counted).
fn timelines(
    dev: &DeviceView,
    r: &mut Replay,
    traced: usize,
    mut live: Vec<i64>,
    mut reserved: Vec<i64>,
    reserved_total: i128,
) {
    let n = reserved.len();
    let mut initial: i128 = 0;
    let mut cut = 0u64;
    // Several reconstructed lifetimes can begin or end at one event: a change past what
    // an i64 holds (only ever with impossible sizes) stops at the top, counted.
    let mut add = |slot: &mut i64, b: i64| {
        *slot = slot.checked_add(b).unwrap_or_else(|| {
            cut += 1;
            slot.saturating_add(b)
        });
    };
    for l in &r.lifetimes[traced.min(r.lifetimes.len())..] {
        let b = counted(l.bytes);
        match l.first_alive() {
            None => initial += i128::from(b),
            Some(a) if (a as usize) < n => add(&mut live[a as usize], b),
            Some(_) => continue, // begins after the last event: never alive in the trace
        }
        if let Some(f) = l.freed {
            add(&mut live[f as usize], -b);
        }
    }
    let final_reserved: i128 = dev
        .segments
        .iter()
        .map(|s| i128::from(counted(capped(s.total_size, &mut cut))))
        .sum();
    // At most 2^32 events and segments of at most 2^63 bytes: no i128 here can wrap.
    let initial_reserved = final_reserved - reserved_total;
    let mut bytes = |v: i128| -> u64 {
        u64::try_from(v.max(0)).unwrap_or_else(|_| {
            cut += 1;
            u64::MAX
        })
    };
    r.initial_requested = bytes(initial);
    r.initial_reserved = bytes(initial_reserved);
    r.negative_reserved = u64::from(initial_reserved < 0);
    r.requested_above_reserved = u64::from(initial > initial_reserved.max(0));
    let (mut running, mut running_reserved) = (initial, initial_reserved);
    for (d, rel) in live.iter_mut().zip(reserved.iter_mut()) {
        running += i128::from(*d);
        running_reserved += i128::from(*rel);
        r.negative_reserved += u64::from(running_reserved < 0);
        r.requested_above_reserved += u64::from(running > running_reserved.max(0));
        // The u64 figures are kept in the i64 slots bit for bit (read back below).
        *d = bytes(running) as i64;
        *rel = bytes(running_reserved) as i64;
    }
    // Same size and alignment: both collects reuse their buffers.
    r.requested = live.into_iter().map(|v| v as u64).collect();
    r.reserved = reserved.into_iter().map(|v| v as u64).collect();
    r.impossible_sizes += cut;
}
