//! Allocation lifetimes and the memory timeline of one device.
//!
//! Memory counts as allocated from `alloc` until `free_completed`, as PyTorch's viewer
//! counts it: between `free_requested` and `free_completed` a block waits for other
//! streams (`active_pending_free`) and is still held. Bytes are the bytes the program
//! requested (trace events carry them; a block alive at the end weighs its
//! `requested_size`). Allocations the trace cannot see are reconstructed: an active block
//! of the final segments that no live `alloc` accounts for was allocated before the trace
//! began (alive from the start), and a `free_completed` with no `alloc` frees an
//! allocation made before the trace began (alive from the start until that free).

use crate::model::addr_map::AddrMap;
use crate::model::fxhash::FastMap;
use crate::model::{Action, Block, DeviceView, StackId, TraceScan};

/// Where a lifetime's allocation comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// An `alloc` event of the trace (its index).
    Traced(u32),
    /// A block alive at the end with no `alloc` in the trace.
    PreTraceBlock,
    /// A `free_completed` (or `free_requested`) whose `alloc` is not in the trace.
    UnmatchedFree,
}

/// One allocation from birth to its `free_completed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// Block address.
    pub addr: u64,
    /// Requested bytes.
    pub bytes: u64,
    /// Where it comes from.
    pub origin: Origin,
    /// `free_requested` event, if any.
    pub free_requested: Option<u32>,
    /// `free_completed` event, or `None` when alive at the end.
    pub freed: Option<u32>,
    /// Stack of the allocation (for reconstructed ones: the block's or the free's frames).
    pub stack: StackId,
    /// Stack of the event that freed it, when the trace has one.
    pub free_stack: Option<StackId>,
}

impl Lifetime {
    /// Whether the allocation holds memory after event `i` (`None`: before any event).
    #[inline]
    pub fn alive_after(&self, i: Option<u32>) -> bool {
        let born = match (self.origin, i) {
            (Origin::Traced(a), Some(i)) => a <= i,
            (Origin::Traced(_), None) => false,
            _ => true,
        };
        // Before any event (`i` is None) everything born before the trace is alive.
        born && self.freed.is_none_or(|f| i.is_none_or(|i| f > i))
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
    pub initial_live: u64,
    /// Reserved bytes before the first event.
    pub initial_reserved: u64,
    /// Live bytes after each event.
    pub live: Vec<u64>,
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
    /// Differences between the replayed end state and `segments`.
    pub mismatches: Vec<Mismatch>,
    /// Indices of `oom` events.
    pub ooms: Vec<u32>,
}

impl Replay {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// True when the device has no trace events.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The peak of live bytes: the first event after which they are highest, with the
    /// bytes (`None` as index: before any event, when nothing in the trace exceeds the start).
    pub fn peak(&self) -> (Option<u32>, u64) {
        let mut best = (None, self.initial_live);
        for (i, &v) in self.live.iter().enumerate() {
            if v > best.1 {
                best = (Some(i as u32), v);
            }
        }
        best
    }

    /// Live bytes after event `i` (`None`: before the first event).
    pub fn live_after(&self, i: Option<u32>) -> u64 {
        match i {
            Some(i) => self
                .live
                .get(i as usize)
                .copied()
                .unwrap_or(self.initial_live),
            None => self.initial_live,
        }
    }

    /// The last event index, `None` when the trace is empty.
    pub fn last_event(&self) -> Option<u32> {
        self.live.len().checked_sub(1).map(|i| i as u32)
    }

    /// Allocations alive after event `i`.
    pub fn live_set(&self, i: Option<u32>) -> impl Iterator<Item = &Lifetime> {
        self.lifetimes.iter().filter(move |l| l.alive_after(i))
    }
}

fn block_stack(b: &Block) -> StackId {
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

/// Replays the trace of `dev` against its final segments.
pub fn replay(dev: &DeviceView) -> Replay {
    let t = dev.trace;
    let n = t.len();
    let mut r = Replay {
        device: dev.device,
        live: Vec::with_capacity(n),
        reserved: Vec::with_capacity(n),
        ..Default::default()
    };
    // addr -> index in lifetimes of the allocation currently holding it
    let mut open: AddrMap<usize> = AddrMap::default();
    let mut open_segments: AddrMap<()> = AddrMap::default();
    // Frees whose alloc is missing: alive from the start until the free.
    let mut unmatched: Vec<Lifetime> = Vec::new();
    let mut live: i128 = 0; // relative to the (unknown yet) initial live bytes
    let mut reserved_delta: i128 = 0;
    let mut live_rel = Vec::with_capacity(n);
    let mut reserved_rel = Vec::with_capacity(n);
    for i in 0..t.len() {
        let addr = t.addr[i];
        let size = t.size[i];
        match t.action[i] {
            Action::ALLOC => {
                if let Some(prev) = open.remove(addr) {
                    // A second alloc at a live address: the trace lost the free.
                    r.double_allocs += 1;
                    r.lifetimes[prev].freed = Some(i as u32);
                    live -= r.lifetimes[prev].bytes as i128;
                }
                open.insert(addr, r.lifetimes.len());
                r.lifetimes.push(Lifetime {
                    addr,
                    bytes: size,
                    origin: Origin::Traced(i as u32),
                    free_requested: None,
                    freed: None,
                    stack: t.stack[i],
                    free_stack: None,
                });
                live += size as i128;
            }
            Action::FREE_REQUESTED => {
                if let Some(k) = open.get(addr) {
                    r.lifetimes[k].free_requested.get_or_insert(i as u32);
                }
            }
            Action::FREE_COMPLETED => match open.remove(addr) {
                Some(k) => {
                    let l = &mut r.lifetimes[k];
                    l.freed = Some(i as u32);
                    l.free_stack = Some(t.stack[i]);
                    live -= l.bytes as i128;
                }
                None => {
                    r.unmatched_frees += 1;
                    unmatched.push(Lifetime {
                        addr,
                        bytes: size,
                        origin: Origin::UnmatchedFree,
                        free_requested: None,
                        freed: Some(i as u32),
                        stack: t.stack[i],
                        free_stack: Some(t.stack[i]),
                    });
                    live -= size as i128;
                }
            },
            Action::SEGMENT_ALLOC | Action::SEGMENT_MAP => {
                open_segments.insert(addr, ());
                reserved_delta += size as i128
            }
            Action::SEGMENT_FREE | Action::SEGMENT_UNMAP => {
                if open_segments.remove(addr).is_none() {
                    r.unmatched_segment_frees += 1;
                }
                reserved_delta -= size as i128
            }
            Action::OOM => r.ooms.push(i as u32),
            _ => {}
        }
        live_rel.push(live);
        reserved_rel.push(reserved_delta);
    }

    // Reconcile with the final segments.
    let mut blocks: FastMap<u64, &Block> = FastMap::default();
    for s in &dev.segments {
        for b in &s.blocks {
            if b.state.is_active() {
                blocks.insert(b.address, b);
            }
        }
    }
    let mut pre_trace = Vec::new();
    for s in &dev.segments {
        for b in &s.blocks {
            if b.state.is_active() && !open.contains_key(b.address) {
                pre_trace.push(Lifetime {
                    addr: b.address,
                    bytes: block_requested(b),
                    origin: Origin::PreTraceBlock,
                    free_requested: None,
                    freed: None,
                    stack: block_stack(b),
                    free_stack: None,
                });
            }
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
            Some(b) if block_requested(b) != l.bytes => r.mismatches.push(Mismatch::Size {
                addr: l.addr,
                traced: l.bytes,
                block: block_requested(b),
            }),
            Some(_) => {}
        }
    }
    r.pre_trace_blocks = pre_trace.len() as u64;
    let initial: i128 = pre_trace
        .iter()
        .chain(&unmatched)
        .map(|l| l.bytes as i128)
        .sum();
    r.lifetimes.extend(pre_trace);
    r.lifetimes.extend(unmatched);
    r.initial_live = initial.max(0) as u64;
    r.live = live_rel
        .into_iter()
        .map(|v| (initial + v).max(0) as u64)
        .collect();
    let final_reserved: i128 = dev.segments.iter().map(|s| s.total_size as i128).sum();
    let initial_reserved = final_reserved - reserved_delta;
    r.initial_reserved = initial_reserved.max(0) as u64;
    r.reserved = reserved_rel
        .into_iter()
        .map(|v| (initial_reserved + v).max(0) as u64)
        .collect();
    r
}
