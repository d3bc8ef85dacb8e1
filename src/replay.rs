//! Stage 2, `replay`: walks a device's trace against its final segments. For now this
//! answers what the trace cannot see (allocations made before it began, frees whose
//! allocation fell out of the ring buffer).

use crate::model::fxhash::FastMap;
use crate::model::{Action, DeviceView};

/// How much of a device's history its trace covers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// `free_completed` events whose address had no live `alloc` earlier in the trace:
    /// the ring buffer wrapped, or recording started after the allocation.
    pub unmatched_frees: u64,
    /// `segment_free`/`segment_unmap` events with no earlier `segment_alloc`/`segment_map`
    /// at that address.
    pub unmatched_segment_frees: u64,
    /// Active blocks in the final `segments` that no live `alloc` of the trace accounts for:
    /// allocated before the trace began.
    pub pre_trace_blocks: u64,
}

/// Walks the trace of `dev` and compares it with its final blocks.
pub fn coverage(dev: &DeviceView) -> Coverage {
    let t = dev.trace;
    let mut live: FastMap<u64, ()> = FastMap::default();
    let mut segs: FastMap<u64, ()> = FastMap::default();
    let mut cov = Coverage::default();
    for i in 0..t.len() {
        let addr = t.addr[i];
        match t.action[i] {
            Action::ALLOC => {
                live.insert(addr, ());
            }
            Action::FREE_COMPLETED if live.remove(&addr).is_none() => cov.unmatched_frees += 1,
            Action::SEGMENT_ALLOC | Action::SEGMENT_MAP => {
                segs.insert(addr, ());
            }
            Action::SEGMENT_FREE | Action::SEGMENT_UNMAP if segs.remove(&addr).is_none() => {
                cov.unmatched_segment_frees += 1
            }
            _ => {}
        }
    }
    cov.pre_trace_blocks = dev
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state.is_active() && !live.contains_key(&b.address))
        .count() as u64;
    cov
}
