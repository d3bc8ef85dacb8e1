//! `leakscope segments`: the segment map at a point of the trace (what PyTorch's
//! `_memory_viz stats` prints at the end only): every segment, what its blocks hold, free
//! space inside blocks (rounding) and between them.

use serde::Serialize;

use super::point::Point;
use crate::model::PoolId;
use crate::model::size::{add_size, sum_sizes};
use crate::replay::AllocatorState;

/// A block.
#[derive(Clone, Debug, Serialize)]
pub struct BlockRow {
    /// Address.
    pub address: u64,
    /// Block size.
    pub size: u64,
    /// Requested bytes (0 when free).
    pub requested: u64,
    /// Held: allocated, or freed by the program and waiting for other streams.
    pub active: bool,
    /// Freed by the program, waiting for other streams (active, no longer allocated).
    pub pending_free: bool,
}

/// A segment.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentRow {
    /// Base address.
    pub address: u64,
    /// Reserved bytes.
    pub total_size: u64,
    /// `small` or `large`.
    pub pool: String,
    /// The memory pool (`segment_pool_id`; `[0, 0]` is the default pool).
    pub pool_id: PoolId,
    /// Stream.
    pub stream: i64,
    /// Expandable segment.
    pub expandable: bool,
    /// Σ sizes of allocated blocks (pending frees excluded).
    pub allocated_bytes: u64,
    /// Σ sizes of active blocks (allocated and pending-free).
    pub active_bytes: u64,
    /// Σ requested bytes of active blocks.
    pub requested_bytes: u64,
    /// Free space inside active blocks (rounding): active minus requested.
    pub internal_free_bytes: u64,
    /// Free blocks.
    pub external_free_bytes: u64,
    /// The largest free block.
    pub largest_free_block_bytes: u64,
    /// Blocks in address order.
    pub blocks: Vec<BlockRow>,
}

/// Totals.
#[derive(Clone, Debug, Serialize, Default)]
pub struct SegmentTotals {
    /// Segments.
    pub segments: u64,
    /// Reserved bytes.
    pub reserved_bytes: u64,
    /// Allocated bytes (pending frees excluded).
    pub allocated_bytes: u64,
    /// Active bytes (allocated and pending-free).
    pub active_bytes: u64,
    /// Requested bytes (of active blocks).
    pub requested_bytes: u64,
    /// Internal free bytes.
    pub internal_free_bytes: u64,
    /// External free bytes.
    pub external_free_bytes: u64,
}

/// The segment map of one device at a point.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceSegments {
    /// Device.
    pub device: i64,
    /// The point.
    pub at: Point,
    /// Segments in address order.
    pub segments: Vec<SegmentRow>,
    /// Totals.
    pub totals: SegmentTotals,
    /// The memory pools, by pool id.
    pub pools: Vec<super::pools::PoolRow>,
    /// Events that could not be undone to reach the point.
    pub reconstruction_unresolved: u64,
}

/// The segment map of `state`.
pub fn segments(device: i64, at: Point, state: &AllocatorState) -> DeviceSegments {
    let mut totals = SegmentTotals::default();
    let rows: Vec<SegmentRow> = state
        .segments
        .iter()
        .map(|s| {
            let size_of = |keep: fn(&crate::replay::StateBlock) -> bool| -> u64 {
                sum_sizes(s.blocks.iter().filter(|b| keep(b)).map(|b| b.size))
            };
            let allocated = size_of(|b| b.allocated());
            let active = size_of(|b| b.active);
            let requested = sum_sizes(s.blocks.iter().filter(|b| b.active).map(|b| b.requested));
            let external = sum_sizes(s.blocks.iter().filter(|b| !b.active).map(|b| b.size));
            let largest = s
                .blocks
                .iter()
                .filter(|b| !b.active)
                .map(|b| b.size)
                .max()
                .unwrap_or(0);
            totals.segments += 1;
            add_size(&mut totals.reserved_bytes, s.total_size);
            add_size(&mut totals.allocated_bytes, allocated);
            add_size(&mut totals.active_bytes, active);
            add_size(&mut totals.requested_bytes, requested);
            add_size(
                &mut totals.internal_free_bytes,
                active.saturating_sub(requested),
            );
            add_size(&mut totals.external_free_bytes, external);
            SegmentRow {
                address: s.address,
                total_size: s.total_size,
                pool: s.pool.clone(),
                pool_id: s.pool_id,
                stream: s.stream,
                expandable: s.expandable,
                allocated_bytes: allocated,
                active_bytes: active,
                requested_bytes: requested,
                internal_free_bytes: active.saturating_sub(requested),
                external_free_bytes: external,
                largest_free_block_bytes: largest,
                blocks: s
                    .blocks
                    .iter()
                    .map(|b| BlockRow {
                        address: b.address,
                        size: b.size,
                        requested: b.requested,
                        active: b.active,
                        pending_free: b.pending_free,
                    })
                    .collect(),
            }
        })
        .collect();
    DeviceSegments {
        device,
        at,
        segments: rows,
        totals,
        pools: super::pools::of_state(state),
        reconstruction_unresolved: state.unresolved,
    }
}
