//! The memory pools: the default pool and each private one (a CUDA graph's pool, a
//! `torch.cuda.MemPool`), with what each reserves and holds. A private pool's free memory
//! serves only its own allocations, so it is counted apart from the default pool's.

use serde::Serialize;

use crate::attribute::{Attributor, FrameFilters, GroupBy, Site};
use crate::model::fxhash::FastMap;
use crate::model::size::add_size;
use crate::model::{Action, BlockState, DeviceView, PoolId, Snapshot, StackId};
use crate::replay::AllocatorState;

/// One pool of one device.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PoolRow {
    /// `segment_pool_id`: `[0, 0]` is the default pool.
    pub pool_id: PoolId,
    /// Whether the pool is private (its free memory serves only its own allocations).
    pub private: bool,
    /// Σ its segments' sizes.
    pub reserved_bytes: u64,
    /// Σ sizes of its allocated blocks (pending frees excluded).
    pub allocated_bytes: u64,
    /// Σ requested bytes of its active blocks.
    pub requested_bytes: u64,
    /// Reserved but not active: cached free memory only this pool can use.
    pub cached_free_bytes: u64,
    /// Its segments.
    pub segments: u64,
    /// Where its first segment was allocated (private pools, when the file says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<Site>,
}

impl PoolRow {
    fn new(pool_id: PoolId) -> PoolRow {
        PoolRow {
            pool_id,
            private: pool_id.is_private(),
            reserved_bytes: 0,
            allocated_bytes: 0,
            requested_bytes: 0,
            cached_free_bytes: 0,
            segments: 0,
            created_by: None,
        }
    }
}

/// Adds a segment's sizes to its pool's row (rows kept sorted by pool id).
fn row_of(rows: &mut Vec<PoolRow>, id: PoolId) -> &mut PoolRow {
    let i = match rows.binary_search_by_key(&id, |r| r.pool_id) {
        Ok(i) => i,
        Err(i) => {
            rows.insert(i, PoolRow::new(id));
            i
        }
    };
    &mut rows[i]
}

/// The pools of `dev`'s final segments, with the site that created each private pool.
pub fn at_end(snap: &Snapshot, dev: &DeviceView) -> Vec<PoolRow> {
    let mut rows: Vec<PoolRow> = Vec::new();
    for s in &dev.segments {
        let (mut active, mut allocated, mut requested) = (0, 0, 0);
        for b in &s.blocks {
            if b.state.is_active() {
                add_size(&mut active, b.size);
                add_size(&mut requested, b.requested_size.unwrap_or(b.size));
            }
            if b.state == BlockState::ActiveAllocated {
                add_size(&mut allocated, b.size);
            }
        }
        let r = row_of(&mut rows, s.pool());
        r.segments += 1;
        add_size(&mut r.reserved_bytes, s.total_size);
        add_size(&mut r.allocated_bytes, allocated);
        add_size(&mut r.requested_bytes, requested);
        add_size(
            &mut r.cached_free_bytes,
            s.total_size.saturating_sub(active),
        );
    }
    name_creators(snap, dev, &mut rows);
    rows
}

/// The pools of a reconstructed state (at any point of the trace).
pub fn of_state(state: &AllocatorState) -> Vec<PoolRow> {
    let mut rows: Vec<PoolRow> = Vec::new();
    for s in &state.segments {
        let r = row_of(&mut rows, s.pool_id);
        r.segments += 1;
        add_size(&mut r.reserved_bytes, s.total_size);
        let mut active = 0;
        for b in &s.blocks {
            if b.active {
                add_size(&mut active, b.size);
                add_size(&mut r.requested_bytes, b.requested);
            }
            if b.allocated() {
                add_size(&mut r.allocated_bytes, b.size);
            }
        }
        add_size(
            &mut r.cached_free_bytes,
            s.total_size.saturating_sub(active),
        );
    }
    rows
}

/// Names each private pool's creator in `rows` (of `dev`, at any point): the site of the
/// earliest `segment_alloc` (or map) in the trace at one of its final segments' addresses,
/// else of the stack its first segment recorded.
pub fn name_creators(snap: &Snapshot, dev: &DeviceView, rows: &mut [PoolRow]) {
    if !rows.iter().any(|r| r.private) {
        return;
    }
    let private: Vec<(u64, PoolId, StackId)> = dev
        .segments
        .iter()
        .filter(|s| s.pool().is_private())
        .map(|s| (s.address, s.pool(), s.stack.unwrap_or(StackId::EMPTY)))
        .collect();
    let at: FastMap<u64, PoolId> = private.iter().map(|&(a, id, _)| (a, id)).collect();
    let mut first: Vec<(PoolId, StackId)> = Vec::new();
    let t = dev.trace;
    for i in 0..t.len() {
        if !matches!(t.action[i], Action::SEGMENT_ALLOC | Action::SEGMENT_MAP) {
            continue;
        }
        if let Some(&id) = at.get(&t.addr[i])
            && !first.iter().any(|(p, _)| *p == id)
        {
            first.push((id, t.stack[i]));
        }
    }
    for (_, id, stack) in &private {
        if !first.iter().any(|(p, _)| p == id) {
            first.push((*id, *stack));
        }
    }
    let mut attr = Attributor::new(snap, GroupBy::Site, &FrameFilters::default());
    for (id, stack) in first {
        let site = attr.key(stack).map(|k| attr.site(k).clone());
        if let Some(r) = rows.iter_mut().find(|r| r.pool_id == id) {
            r.created_by = site;
        }
    }
}
