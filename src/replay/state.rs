//! The allocator's segments and blocks at any event.
//!
//! Segments are rebuilt by undoing the trace's segment events backwards from the final
//! `segments` (as PyTorch's "Allocator State History" view does), the expandable segments'
//! `segment_map`/`segment_unmap` included: a snapshot lists each contiguous mapped range
//! of an expandable segment as a segment, so undoing a map cuts its range out (splitting
//! the segment around it) and undoing an unmap puts the range back, joined to the
//! address-adjacent expandable segments of its stream. A segment re-created by undoing a
//! `segment_free` or `segment_unmap` lies on the event's stream.
//!
//! Blocks are the replay's allocations alive at that point ([`Replay::lifetimes`]), so the
//! state and the timeline never disagree: an allocation held to the end has its final
//! block's size; one freed before has its request rounded up to the allocator's 512-byte
//! granularity, or the whole gap up to the next block when what is left would be smaller
//! than a block the allocator splits off (512 bytes in the small pool, 1 MiB in the large
//! one). Between blocks lie free blocks (the allocator merges neighbouring free blocks).

use super::lifetimes::Replay;
use crate::model::fxhash::FastMap;
use crate::model::size::{GRANULE, end_of, round_up_to_granule, sum_sizes};
use crate::model::{Action, BlockState, DeviceView, PoolId};

/// A block in a reconstructed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateBlock {
    /// Address.
    pub address: u64,
    /// Block size (rounded).
    pub size: u64,
    /// Requested bytes (0 for free blocks).
    pub requested: u64,
    /// Held: allocated, or freed by the program and waiting for other streams.
    pub active: bool,
    /// Freed by the program, waiting for other streams (`active_pending_free`): active,
    /// but no longer allocated.
    pub pending_free: bool,
}

impl StateBlock {
    fn free(address: u64, size: u64) -> StateBlock {
        StateBlock {
            address,
            size,
            requested: 0,
            active: false,
            pending_free: false,
        }
    }

    /// Allocated to the program (active and not pending its free).
    pub fn allocated(&self) -> bool {
        self.active && !self.pending_free
    }

    fn end(&self) -> u64 {
        end_of(self.address, self.size)
    }
}

/// A segment in a reconstructed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateSegment {
    /// Base address.
    pub address: u64,
    /// Reserved bytes.
    pub total_size: u64,
    /// Stream.
    pub stream: i64,
    /// `small` or `large`.
    pub pool: String,
    /// The memory pool (`segment_pool_id`): a segment re-created by undoing a free takes
    /// the event's `pool_id` where the trace records one, else the default pool.
    pub pool_id: PoolId,
    /// Expandable segment.
    pub expandable: bool,
    /// Blocks in address order.
    pub blocks: Vec<StateBlock>,
}

impl StateSegment {
    fn end(&self) -> u64 {
        end_of(self.address, self.total_size)
    }
}

/// Segments at a point of the trace.
#[derive(Clone, Debug, Default)]
pub struct AllocatorState {
    /// Segments in address order.
    pub segments: Vec<StateSegment>,
    /// Events that could not be undone (their block or segment was not found, or an
    /// unmapped range still held a block).
    pub unresolved: u64,
}

const SMALL_POOL_MAX: u64 = 1 << 20;

/// The pool of a segment re-created without a neighbour to take it from: non-expandable
/// small segments are 2 MiB.
fn pool_by_size(size: u64) -> String {
    if size <= 2 * SMALL_POOL_MAX {
        "small".into()
    } else {
        "large".into()
    }
}

impl AllocatorState {
    /// The final segments of `dev`.
    pub fn at_end(dev: &DeviceView) -> AllocatorState {
        let mut segments: Vec<StateSegment> = dev
            .segments
            .iter()
            .map(|s| StateSegment {
                address: s.address,
                total_size: s.total_size,
                stream: s.stream.unwrap_or(0),
                pool: s.segment_type.clone().unwrap_or_else(|| "large".into()),
                pool_id: s.pool(),
                expandable: s.is_expandable.unwrap_or(false),
                blocks: s
                    .blocks
                    .iter()
                    .map(|b| StateBlock {
                        address: b.address,
                        size: b.size,
                        requested: if b.state == BlockState::Inactive {
                            0
                        } else {
                            b.requested_size.unwrap_or(b.size)
                        },
                        active: b.state.is_active(),
                        pending_free: matches!(
                            b.state,
                            BlockState::ActivePendingFree | BlockState::ActiveAwaitingFree
                        ),
                    })
                    .collect(),
            })
            .collect();
        segments.sort_by_key(|s| s.address);
        AllocatorState {
            segments,
            unresolved: 0,
        }
    }

    /// The state right after event `k` of `dev`'s trace (`None`: before the first
    /// event), with `replay` the device's replay.
    pub fn after(dev: &DeviceView, replay: &Replay, k: Option<u32>) -> AllocatorState {
        let end = AllocatorState::at_end(dev);
        let final_blocks: FastMap<u64, u64> = end
            .blocks()
            .filter(|(_, b)| b.active)
            .map(|(_, b)| (b.address, b.size))
            .collect();
        let mut st = AllocatorState {
            segments: end.segments,
            unresolved: 0,
        };
        for s in &mut st.segments {
            s.blocks.clear();
        }
        let t = dev.trace;
        let first = k.map_or(0, |k| k as usize + 1);
        for i in (first..t.len()).rev() {
            let (addr, size) = (t.addr[i], t.size[i]);
            let ok = match t.action[i] {
                Action::SEGMENT_ALLOC => st.remove_segment(addr),
                Action::SEGMENT_FREE => {
                    st.add_segment(addr, size, dev.stream_of(i), dev.pool_of(i))
                }
                Action::SEGMENT_MAP => st.unmap(addr, size),
                Action::SEGMENT_UNMAP => st.map(addr, size, dev.stream_of(i), dev.pool_of(i)),
                _ => true,
            };
            st.unresolved += u64::from(!ok);
        }
        // Each segment's allocations, with whether their size is known (their final block).
        let mut held: Vec<Vec<(StateBlock, bool)>> = vec![Vec::new(); st.segments.len()];
        for l in replay.live_set(k) {
            let Some(si) = st.segment_index(l.addr) else {
                st.unresolved += 1; // an allocation outside every segment of the time
                continue;
            };
            let exact = l
                .freed
                .is_none()
                .then(|| final_blocks.get(&l.addr))
                .flatten();
            let block = StateBlock {
                address: l.addr,
                size: exact
                    .copied()
                    .unwrap_or_else(|| round_up_to_granule(l.bytes)),
                requested: l.bytes,
                active: true,
                pending_free: l.pending_after(k),
            };
            held[si].push((block, exact.is_some()));
        }
        for (seg, blocks) in st.segments.iter_mut().zip(held) {
            st.unresolved += lay_out(seg, blocks);
        }
        st
    }

    fn segment_index(&self, addr: u64) -> Option<usize> {
        let i = self.segments.partition_point(|s| s.address <= addr);
        let i = i.checked_sub(1)?;
        (addr < self.segments[i].end()).then_some(i)
    }

    /// Undoes a `segment_free`: the segment exists again, all free.
    fn add_segment(&mut self, addr: u64, size: u64, stream: i64, pool_id: PoolId) -> bool {
        if self.overlaps(addr, size) {
            return false;
        }
        let i = self.segments.partition_point(|s| s.address < addr);
        self.segments.insert(
            i,
            StateSegment {
                address: addr,
                total_size: size,
                stream,
                pool: pool_by_size(size),
                pool_id,
                expandable: false,
                blocks: vec![StateBlock::free(addr, size)],
            },
        );
        true
    }

    /// Undoes a `segment_alloc`: the segment did not exist before.
    fn remove_segment(&mut self, addr: u64) -> bool {
        match self.segments.iter().position(|s| s.address == addr) {
            Some(i) => {
                let held = self.segments[i].blocks.iter().any(|b| b.active);
                self.segments.remove(i);
                !held
            }
            None => false,
        }
    }

    fn overlaps(&self, addr: u64, size: u64) -> bool {
        self.segments
            .iter()
            .any(|s| s.address < end_of(addr, size) && addr < s.end())
    }

    /// Undoes a `segment_map`: the range was not mapped before. It is cut out of the
    /// segment holding it; what remains on either side stays a segment of its own.
    fn unmap(&mut self, addr: u64, size: u64) -> bool {
        let Some(i) = self.segment_index(addr) else {
            return false;
        };
        let end = end_of(addr, size);
        let seg = self.segments.remove(i);
        let fits = end <= seg.end();
        let mut held = false;
        let mut before: Vec<StateBlock> = Vec::new();
        let mut after: Vec<StateBlock> = Vec::new();
        for b in seg.blocks.iter() {
            if b.end() <= addr {
                before.push(b.clone());
            } else if b.address >= end {
                after.push(b.clone());
            } else {
                // A block in the range: free ones are trimmed to what lies outside it.
                held |= b.active;
                if b.address < addr {
                    before.push(StateBlock::free(b.address, addr - b.address));
                }
                if b.end() > end {
                    after.push(StateBlock::free(end, b.end() - end));
                }
            }
        }
        let part = |address: u64, end: u64, blocks: Vec<StateBlock>| StateSegment {
            address,
            total_size: end - address,
            blocks,
            ..seg.clone()
        };
        let mut at = i;
        if addr > seg.address {
            self.segments.insert(at, part(seg.address, addr, before));
            at += 1;
        }
        if end < seg.end() {
            self.segments.insert(at, part(end, seg.end(), after));
        }
        fits && !held
    }

    /// Undoes a `segment_unmap`: the range was mapped (and free) before; it joins the
    /// address-adjacent expandable segments of its stream.
    fn map(&mut self, addr: u64, size: u64, stream: i64, pool_id: PoolId) -> bool {
        if self.overlaps(addr, size) {
            return false;
        }
        let end = end_of(addr, size);
        let i = self.segments.partition_point(|s| s.address < addr);
        let joins = |s: &StateSegment| s.expandable && s.stream == stream;
        let left = i
            .checked_sub(1)
            .filter(|&l| self.segments[l].end() == addr && joins(&self.segments[l]));
        let right = (i < self.segments.len()
            && self.segments[i].address == end
            && joins(&self.segments[i]))
        .then_some(i);
        let (pool, pool_id) = left.or(right).map_or_else(
            || (pool_by_size(size), pool_id),
            |k| (self.segments[k].pool.clone(), self.segments[k].pool_id),
        );
        let mut seg = StateSegment {
            address: addr,
            total_size: size,
            stream,
            pool,
            pool_id,
            expandable: true,
            blocks: vec![StateBlock::free(addr, size)],
        };
        if let Some(r) = right {
            let r = self.segments.remove(r);
            seg.total_size = seg.total_size.saturating_add(r.total_size);
            seg.blocks.extend(r.blocks);
            merge_free_around(&mut seg.blocks, 0);
        }
        match left {
            Some(l) => {
                let l = &mut self.segments[l];
                let at = l.blocks.len();
                l.total_size = l.total_size.saturating_add(seg.total_size);
                l.blocks.extend(seg.blocks);
                merge_free_around(&mut l.blocks, at);
            }
            None => self.segments.insert(i, seg),
        }
        true
    }

    /// Σ segment sizes: `reserved`.
    pub fn reserved(&self) -> u64 {
        sum_sizes(self.segments.iter().map(|s| s.total_size))
    }

    /// Σ sizes of allocated blocks (pending frees excluded, as
    /// `torch.cuda.memory_allocated`): `allocated`.
    pub fn allocated(&self) -> u64 {
        sum_sizes(
            self.blocks()
                .filter(|(_, b)| b.allocated())
                .map(|(_, b)| b.size),
        )
    }

    /// Σ sizes of active blocks (allocated and pending-free): `active`.
    pub fn active(&self) -> u64 {
        sum_sizes(self.blocks().filter(|(_, b)| b.active).map(|(_, b)| b.size))
    }

    /// Σ requested bytes of active blocks (as PyTorch's `requested_bytes`, which a block
    /// leaves at its `free_completed`): `requested`.
    pub fn requested(&self) -> u64 {
        sum_sizes(
            self.blocks()
                .filter(|(_, b)| b.active)
                .map(|(_, b)| b.requested),
        )
    }

    /// Every block with its segment.
    pub fn blocks(&self) -> impl Iterator<Item = (&StateSegment, &StateBlock)> {
        self.segments
            .iter()
            .flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
    }
}

/// Places a segment's allocations in address order with free blocks in the gaps; a size
/// that is only an estimate takes the rest of its gap when the rest is too small to split
/// off. Returns how many allocations overlap the one before (they are kept, counted).
fn lay_out(seg: &mut StateSegment, mut held: Vec<(StateBlock, bool)>) -> u64 {
    held.sort_by_key(|(b, _)| b.address);
    let split_min = if seg.pool == "small" || seg.total_size <= 2 * SMALL_POOL_MAX {
        GRANULE
    } else {
        SMALL_POOL_MAX
    };
    let mut overlaps = 0;
    let mut cursor = seg.address;
    let mut blocks = Vec::with_capacity(2 * held.len() + 1);
    for j in 0..held.len() {
        let next = held
            .get(j + 1)
            .map_or(seg.end(), |(b, _)| b.address)
            .min(seg.end());
        let (mut b, exact) = held[j].clone();
        if b.address < cursor {
            overlaps += 1;
        } else if b.address > cursor {
            blocks.push(StateBlock::free(cursor, b.address - cursor));
        }
        if !exact && next > b.address {
            b.size = b.size.min(next - b.address);
            let rest = next - b.end();
            if rest < split_min {
                b.size += rest; // the allocator hands out a remainder too small to split
            }
        }
        cursor = cursor.max(b.end());
        blocks.push(b);
    }
    if cursor < seg.end() {
        blocks.push(StateBlock::free(cursor, seg.end() - cursor));
    }
    seg.blocks = blocks;
    overlaps
}

/// Merges the free block at `i` with free neighbours.
fn merge_free_around(blocks: &mut Vec<StateBlock>, i: usize) {
    if i >= blocks.len() || blocks[i].active {
        return;
    }
    if i + 1 < blocks.len() && !blocks[i + 1].active {
        let next = blocks.remove(i + 1);
        blocks[i].size = blocks[i].size.saturating_add(next.size);
    }
    if i > 0 && !blocks[i - 1].active {
        let cur = blocks.remove(i);
        blocks[i - 1].size = blocks[i - 1].size.saturating_add(cur.size);
    }
}
