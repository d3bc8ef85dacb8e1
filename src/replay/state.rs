//! The allocator's segments and blocks at any event, reconstructed by undoing the trace
//! backwards from the final `segments` (as PyTorch's "Allocator State History" view does).
//!
//! The trace records requested bytes, not block sizes: a block re-created by undoing a
//! free gets its request rounded up to the allocator's 512-byte granularity, or the whole
//! free range when what is left would be smaller than a block the allocator splits off
//! (512 bytes in the small pool, 1 MiB in the large one). A segment re-created by undoing
//! a `segment_free` is one free block. Expandable segments (`segment_map`/`unmap`) are
//! taken as they are at the end.

use crate::model::{Action, BlockState, DeviceView};

/// A block in a reconstructed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateBlock {
    /// Address.
    pub address: u64,
    /// Block size (rounded).
    pub size: u64,
    /// Requested bytes (0 for free blocks).
    pub requested: u64,
    /// Allocated and not yet free (including pending frees).
    pub active: bool,
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
    /// Expandable segment.
    pub expandable: bool,
    /// Blocks in address order.
    pub blocks: Vec<StateBlock>,
}

/// Segments at a point of the trace.
#[derive(Clone, Debug, Default)]
pub struct AllocatorState {
    /// Segments in address order.
    pub segments: Vec<StateSegment>,
    /// Events that could not be undone (their block or segment was not found).
    pub unresolved: u64,
}

const SMALL_POOL_MAX: u64 = 1 << 20;

fn round_block(size: u64) -> u64 {
    size.max(1).div_ceil(512) * 512
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

    /// The state right after event `k` of `dev`'s trace (`None`: before the first event).
    pub fn after(dev: &DeviceView, k: Option<u32>) -> AllocatorState {
        let mut st = AllocatorState::at_end(dev);
        let t = dev.trace;
        let first = k.map_or(0, |k| k as usize + 1);
        for i in (first..t.len()).rev() {
            let (addr, size) = (t.addr[i], t.size[i]);
            let ok = match t.action[i] {
                Action::FREE_COMPLETED => st.reallocate(addr, size),
                Action::ALLOC => st.release(addr),
                Action::SEGMENT_FREE => st.add_segment(addr, size, t),
                Action::SEGMENT_ALLOC => st.remove_segment(addr),
                _ => true,
            };
            if !ok {
                st.unresolved += 1;
            }
        }
        st
    }

    fn segment_of(&mut self, addr: u64) -> Option<&mut StateSegment> {
        let i = self.segments.partition_point(|s| s.address <= addr);
        let s = self.segments.get_mut(i.checked_sub(1)?)?;
        (addr < s.address + s.total_size).then_some(s)
    }

    /// Undoes a free: the block at `addr` is allocated again.
    fn reallocate(&mut self, addr: u64, requested: u64) -> bool {
        let Some(seg) = self.segment_of(addr) else {
            return false;
        };
        let split_min = if seg.pool == "small" || seg.total_size <= 2 * SMALL_POOL_MAX {
            512
        } else {
            SMALL_POOL_MAX
        };
        let Some(bi) = seg
            .blocks
            .iter()
            .position(|b| !b.active && b.address <= addr && addr < b.address + b.size)
        else {
            return false;
        };
        let free = seg.blocks[bi].clone();
        let mut size = round_block(requested).min(free.address + free.size - addr);
        let rest = free.address + free.size - (addr + size);
        if rest < split_min {
            size += rest; // the allocator hands out the remainder too small to split off
        }
        let mut parts = Vec::new();
        if addr > free.address {
            parts.push(StateBlock {
                address: free.address,
                size: addr - free.address,
                requested: 0,
                active: false,
            });
        }
        parts.push(StateBlock {
            address: addr,
            size,
            requested,
            active: true,
        });
        if addr + size < free.address + free.size {
            parts.push(StateBlock {
                address: addr + size,
                size: free.address + free.size - addr - size,
                requested: 0,
                active: false,
            });
        }
        seg.blocks.splice(bi..=bi, parts);
        true
    }

    /// Undoes an alloc: the block at `addr` is free again (merged with free neighbours).
    fn release(&mut self, addr: u64) -> bool {
        let Some(seg) = self.segment_of(addr) else {
            return false;
        };
        let Some(bi) = seg
            .blocks
            .iter()
            .position(|b| b.address == addr && b.active)
        else {
            return false;
        };
        seg.blocks[bi].active = false;
        seg.blocks[bi].requested = 0;
        // Merge with the next, then the previous free block.
        if bi + 1 < seg.blocks.len() && !seg.blocks[bi + 1].active {
            let next = seg.blocks.remove(bi + 1);
            seg.blocks[bi].size += next.size;
        }
        if bi > 0 && !seg.blocks[bi - 1].active {
            let cur = seg.blocks.remove(bi);
            seg.blocks[bi - 1].size += cur.size;
        }
        true
    }

    /// Undoes a `segment_free`: the segment exists again, all free.
    fn add_segment(&mut self, addr: u64, size: u64, _t: &crate::model::Trace) -> bool {
        if self.segment_of(addr).is_some() {
            return false;
        }
        let i = self.segments.partition_point(|s| s.address < addr);
        self.segments.insert(
            i,
            StateSegment {
                address: addr,
                total_size: size,
                stream: 0,
                pool: if size <= 2 * SMALL_POOL_MAX {
                    "small".into()
                } else {
                    "large".into()
                },
                expandable: false,
                blocks: vec![StateBlock {
                    address: addr,
                    size,
                    requested: 0,
                    active: false,
                }],
            },
        );
        true
    }

    /// Undoes a `segment_alloc`: the segment did not exist before.
    fn remove_segment(&mut self, addr: u64) -> bool {
        match self.segments.iter().position(|s| s.address == addr) {
            Some(i) => {
                self.segments.remove(i);
                true
            }
            None => false,
        }
    }

    /// Σ segment sizes.
    pub fn reserved(&self) -> u64 {
        self.segments.iter().map(|s| s.total_size).sum()
    }

    /// Σ sizes of active blocks.
    pub fn allocated(&self) -> u64 {
        self.blocks()
            .filter(|(_, b)| b.active)
            .map(|(_, b)| b.size)
            .sum()
    }

    /// Σ requested bytes of active blocks.
    pub fn requested(&self) -> u64 {
        self.blocks()
            .filter(|(_, b)| b.active)
            .map(|(_, b)| b.requested)
            .sum()
    }

    /// Every block with its segment.
    pub fn blocks(&self) -> impl Iterator<Item = (&StateSegment, &StateBlock)> {
        self.segments
            .iter()
            .flat_map(|s| s.blocks.iter().map(move |b| (s, b)))
    }
}
