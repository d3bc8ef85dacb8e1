//! Where a device's trace and its final state disagree, or the input describes what an
//! allocator cannot do: counted, so every command can say so once, and never fatal.

use serde::Serialize;

use super::lifetimes::{Mismatch, Replay};
use crate::model::DeviceView;
use crate::model::size::sum_overflows;

/// What does not add up on one device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Consistency {
    /// The device.
    pub device: i64,
    /// Allocations the replay leaves open at the end with no active block at their
    /// address in the final segments.
    pub open_without_block: u64,
    /// Open allocations whose block's `requested_size` differs from the trace's.
    pub size_mismatches: u64,
    /// Frees whose allocation is not in the trace (expected once a ring buffer wrapped).
    pub unmatched_frees: u64,
    /// `free_requested` with no live allocation at its address.
    pub stray_free_requests: u64,
    /// `alloc` at an address already live.
    pub double_allocs: u64,
    /// Segment frees or unmaps with no earlier segment alloc or map.
    pub unmatched_segment_frees: u64,
    /// Final segments whose blocks do not tile them exactly (a gap, an overlap, or blocks
    /// beyond the segment's end).
    pub segments_not_covered: u64,
    /// Points (before the first event, after each) at which the bytes requested exceed
    /// the bytes reserved.
    pub requested_above_reserved: u64,
    /// Points at which the reserved bytes, counted back from the final segments, would be
    /// negative.
    pub negative_reserved: u64,
    /// Sizes no device has: sizes of 2^63 bytes or more, sums of sizes past 2^64 - 1,
    /// segments that end past the top of the address space. Figures are counted up to
    /// what they can hold, never wrapped round.
    pub impossible_sizes: u64,
}

impl Consistency {
    /// The checks of one device's replay.
    pub fn of(view: &DeviceView, replay: &Replay) -> Consistency {
        let (mut open_without_block, mut size_mismatches) = (0, 0);
        for m in &replay.mismatches {
            match m {
                Mismatch::NoBlock { .. } => open_without_block += 1,
                Mismatch::Size { .. } => size_mismatches += 1,
            }
        }
        let segments_not_covered = view
            .segments
            .iter()
            .filter(|s| {
                let mut cursor = s.address;
                let tiles = s.blocks.iter().all(|b| {
                    let ok = b.address == cursor;
                    cursor = b.address.saturating_add(b.size);
                    ok
                });
                !(tiles && cursor == s.address.saturating_add(s.total_size))
            })
            .count() as u64;
        let beyond = view
            .segments
            .iter()
            .filter(|s| {
                s.address.checked_add(s.total_size).is_none()
                    || sum_overflows(s.blocks.iter().map(|b| b.size))
            })
            .count() as u64;
        let impossible_sizes = replay.impossible_sizes
            + beyond
            + u64::from(sum_overflows(view.segments.iter().map(|s| s.total_size)));
        Consistency {
            device: view.device,
            open_without_block,
            size_mismatches,
            unmatched_frees: replay.unmatched_frees,
            stray_free_requests: replay.stray_free_requests,
            double_allocs: replay.double_allocs,
            unmatched_segment_frees: replay.unmatched_segment_frees,
            segments_not_covered,
            requested_above_reserved: replay.requested_above_reserved,
            negative_reserved: replay.negative_reserved,
            impossible_sizes,
        }
    }

    /// Whether the trace and the final state contradict each other, or the input holds
    /// something no allocator produces. Frees of allocations made before the trace are
    /// not that: a ring buffer that wrapped leaves them.
    pub fn disagrees(&self) -> bool {
        self.open_without_block
            + self.size_mismatches
            + self.stray_free_requests
            + self.double_allocs
            + self.segments_not_covered
            + self.requested_above_reserved
            + self.negative_reserved
            + self.impossible_sizes
            > 0
    }
}
