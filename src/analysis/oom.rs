//! `leakscope oom`: why an allocation failed. The allocator's state is reconstructed at the
//! `oom` event (OOM dumps go on past it: the exception unwinds and frees, `empty_cache`
//! releases segments), then: what was asked, what the driver had, what the cache held
//! free and in what pieces, who held the rest, what grew before, and what to do about it
//! when the numbers say so.

use serde::Serialize;

use super::leaks::{DeviceLeaks, Kind};
use super::point::{self, At};
use super::pools::PoolRow;
use super::top;
use crate::attribute::{Attributor, Site};
use crate::model::size::round_up_to_granule;
use crate::model::{Action, AllocatorSettings, DeviceView, PoolId, Snapshot, flags};
use crate::replay::{AllocatorState, Replay};
use crate::windows::Windows;

/// The devices whose trace has an `oom` event, in index order.
pub fn oom_devices(snap: &Snapshot) -> Vec<i64> {
    snap.devices()
        .iter()
        .filter(|d| d.trace.has_action(Action::OOM))
        .map(|d| d.device)
        .collect()
}

/// Requests of at most this many bytes are served from the small pool.
const SMALL_REQUEST: u64 = 1 << 20;

/// The failed request.
#[derive(Clone, Debug, Serialize)]
pub struct OomEvent {
    /// Whether the trace has an `oom` event (otherwise the end state is explained).
    pub found: bool,
    /// Its index in the device's trace.
    pub event_index: Option<u32>,
    /// The size of the allocation that failed (the `oom` event's `size`).
    pub request_bytes: Option<u64>,
    /// Bytes the driver reported free (`device_free`).
    pub device_free_bytes: Option<u64>,
    /// `time_us`, when the file has it.
    pub time_us: Option<i64>,
    /// The pool the request belongs to (`small`: at most 1 MiB).
    pub pool: Option<&'static str>,
}

/// Largest free block of one stream.
#[derive(Clone, Debug, Serialize)]
pub struct StreamFree {
    /// Stream.
    pub stream: i64,
    /// Largest free block on it.
    pub largest_free_block_bytes: u64,
    /// Σ free blocks on it.
    pub cached_free_bytes: u64,
}

/// Largest free blocks per pool.
#[derive(Clone, Debug, Serialize, Default)]
pub struct PoolFree {
    /// Small pool (≤ 1 MiB requests).
    pub small: u64,
    /// Large pool.
    pub large: u64,
}

/// A holder of memory at the failure.
#[derive(Clone, Debug, Serialize)]
pub struct Holder {
    /// Where the memory was allocated.
    pub site: Site,
    /// The role of most of its bytes.
    pub role: String,
    /// Its bytes by role, largest first.
    pub roles: Vec<super::top::RoleBytes>,
    /// The names its memory was given (see [`super::top::TopRow::names`]).
    #[serde(skip_serializing_if = "crate::attribute::names::Names::is_empty")]
    pub names: crate::attribute::names::Names,
    /// Live requested bytes.
    pub bytes: u64,
    /// Allocations.
    pub blocks: u64,
}

/// A site that grew per window before the failure.
#[derive(Clone, Debug, Serialize)]
pub struct GrewBefore {
    /// Where the memory was allocated.
    pub site: Site,
    /// Its rate.
    pub bytes_per_window: u64,
    /// Windows it grew in.
    pub windows_growing: u64,
    /// Windows before the failure.
    pub windows_total: u64,
    /// `leak` or `retained`.
    pub kind: Kind,
}

/// Live blocks of one site that keep free memory apart: freeing one of them would join
/// the free blocks on either side.
#[derive(Clone, Debug, Serialize)]
pub struct Pinning {
    /// Where the blocks were allocated.
    pub site: Site,
    /// The role of most of their bytes.
    pub role: String,
    /// Their blocks.
    pub blocks: u64,
    /// Their requested bytes.
    pub bytes: u64,
    /// The free bytes right beside them.
    pub free_beside_bytes: u64,
    /// Whether freeing one of them alone would have made a block large enough.
    pub would_make_room: bool,
}

/// What to do, only where the numbers support it. Each advice carries the allocator
/// settings it read.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Advice {
    /// The request would have fit in the pool's cached free memory, but no block was large
    /// enough. Expandable segments off: turn them on (or `max_split_size_mb`). On: the live
    /// blocks pinning the free space are named, and the peak must come down.
    Fragmentation {
        /// `PYTORCH_CUDA_ALLOC_CONF` or `PYTORCH_NPU_ALLOC_CONF`.
        setting: &'static str,
        /// The allocator settings the advice read.
        settings: AllocatorSettings,
        /// The live blocks keeping the free memory apart, most free bytes beside first.
        pinning: Vec<Pinning>,
        /// Cached free bytes in the request's pool.
        cached_free_in_pool_bytes: u64,
        /// The pool.
        pool: &'static str,
        /// The request rounded to a block.
        needed_bytes: u64,
        /// The largest free block.
        largest_free_block_bytes: u64,
    },
    /// Memory grew per window before the failure: fix that first.
    Growth {
        /// The fastest-growing suspect.
        grew: GrewBefore,
        /// The allocator settings the advice read.
        settings: AllocatorSettings,
    },
    /// The device was full: the working set itself is too large.
    DeviceFull {
        /// The allocator settings the advice read.
        settings: AllocatorSettings,
        /// The request rounded to a block.
        needed_bytes: u64,
        /// Cached free bytes in its pool.
        cached_free_in_pool_bytes: u64,
        /// What the driver had free.
        device_free_bytes: u64,
    },
}

/// The explanation of one device's failure (or end state).
#[derive(Clone, Debug, Serialize)]
pub struct DeviceOom {
    /// Device.
    pub device: i64,
    /// The failed request.
    pub oom: OomEvent,
    /// Reserved bytes (segments) at the failure.
    pub reserved_bytes: u64,
    /// Σ sizes of allocated blocks (pending frees excluded).
    pub allocated_bytes: u64,
    /// Σ sizes of active blocks (allocated and pending-free).
    pub active_bytes: u64,
    /// Σ bytes the program asked for, of active blocks.
    pub requested_bytes: u64,
    /// Reserved but not active: cached free blocks.
    pub cached_free_bytes: u64,
    /// Cached free bytes in the request's pool.
    pub cached_free_in_pool_bytes: u64,
    /// The largest cached free block.
    pub largest_free_block_bytes: u64,
    /// The largest free block per pool.
    pub largest_free_block_by_pool: PoolFree,
    /// Per stream.
    pub streams: Vec<StreamFree>,
    /// The memory pool the request was for (the default pool unless the `oom` event names
    /// one).
    pub request_pool_id: PoolId,
    /// Cached free bytes in other pools (private pools: CUDA graphs, `MemPool`s), which
    /// cannot serve the request.
    pub other_pools_free_bytes: u64,
    /// The memory pools at the failure.
    pub pools: Vec<PoolRow>,
    /// The allocator settings the file recorded.
    pub allocator_settings: AllocatorSettings,
    /// `1 - largest free block / cached free` (0 when nothing is cached free).
    pub fragmentation: f64,
    /// Whether the request would have fit in the request pool's cached free memory, were
    /// it one block.
    pub would_fit_if_contiguous: Option<bool>,
    /// Who held memory at the failure, largest first.
    pub top_holders: Vec<Holder>,
    /// Sites that grew per window before the failure (the leak finder's suspects).
    pub grew_before: Vec<GrewBefore>,
    /// What to do, only where the numbers support it.
    pub advice: Vec<Advice>,
    /// Events the state reconstruction could not undo (0 when the trace is complete).
    pub reconstruction_unresolved: u64,
}

/// The windows before the failure (the leak finder looks only there).
pub fn windows_before(w: &Windows, replay: &Replay) -> Windows {
    match replay.ooms.first() {
        Some(&k) => w.restrict(&[(0, k + 1)], "the events before the oom"),
        None => w.clone(),
    }
}

/// The cached free memory of a reconstructed state, per pool and stream.
struct FreeMemory {
    by_pool: PoolFree,
    cached_free: u64,
    in_pool: u64,
    other_pools: u64,
    streams: Vec<StreamFree>,
}

/// The cached free memory of `state`; what lies in memory pools other than `memory_pool`
/// is counted apart (it cannot serve the request).
fn free_memory(
    state: &AllocatorState,
    pool: Option<&'static str>,
    memory_pool: PoolId,
) -> FreeMemory {
    let mut f = FreeMemory {
        by_pool: PoolFree::default(),
        cached_free: 0,
        in_pool: 0,
        other_pools: 0,
        streams: Vec::new(),
    };
    for (seg, b) in state.blocks().filter(|(_, b)| !b.active) {
        f.cached_free = f.cached_free.saturating_add(b.size);
        if seg.pool_id != memory_pool {
            f.other_pools = f.other_pools.saturating_add(b.size);
            continue;
        }
        let small = seg.pool == "small";
        let slot = if small {
            &mut f.by_pool.small
        } else {
            &mut f.by_pool.large
        };
        *slot = (*slot).max(b.size);
        if pool == Some(if small { "small" } else { "large" }) {
            f.in_pool = f.in_pool.saturating_add(b.size);
        }
        match f.streams.iter_mut().find(|s| s.stream == seg.stream) {
            Some(s) => {
                s.largest_free_block_bytes = s.largest_free_block_bytes.max(b.size);
                s.cached_free_bytes = s.cached_free_bytes.saturating_add(b.size);
            }
            None => f.streams.push(StreamFree {
                stream: seg.stream,
                largest_free_block_bytes: b.size,
                cached_free_bytes: b.size,
            }),
        }
    }
    f.streams.sort_by_key(|s| s.stream);
    f
}

fn oom_event(snap: &Snapshot, dev: &DeviceView, idx: Option<u32>) -> OomEvent {
    let Some(k) = idx else {
        return OomEvent {
            found: false,
            event_index: None,
            request_bytes: None,
            device_free_bytes: None,
            time_us: None,
            pool: None,
        };
    };
    let (t, k) = (dev.trace, k as usize);
    let m = snap.meta(t.meta[k]);
    let requested = t.size[k];
    OomEvent {
        found: true,
        event_index: Some(k as u32),
        request_bytes: Some(requested),
        device_free_bytes: m.device_free(t.addr[k]),
        time_us: m.has(flags::TIME).then_some(t.time_us[k]),
        pool: Some(if requested <= SMALL_REQUEST {
            "small"
        } else {
            "large"
        }),
    }
}

fn holders(snap: &Snapshot, replay: &Replay, attr: &mut Attributor, oom: bool) -> Vec<Holder> {
    let at = if oom { At::Oom } else { At::End };
    point::resolve(snap, replay, at)
        .map(|p| {
            top::top(replay, p, attr, 10)
                .rows
                .into_iter()
                .map(|x| Holder {
                    site: x.site,
                    role: x.role,
                    roles: x.roles,
                    names: x.names,
                    bytes: x.bytes,
                    blocks: x.blocks,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The figures of `state` for the request `oom`, with its holders and what grew before;
/// the advice follows from them.
#[allow(clippy::too_many_arguments)]
fn from_state(
    snap: &Snapshot,
    dev: &DeviceView,
    oom: OomEvent,
    state: &AllocatorState,
    top_holders: Vec<Holder>,
    grew_before: Vec<GrewBefore>,
    guessed: bool,
    pinning: &mut dyn FnMut(&AllocatorState, u64, PoolId) -> Vec<Pinning>,
) -> DeviceOom {
    let memory_pool = oom
        .event_index
        .map_or(PoolId::DEFAULT, |k| dev.pool_of(k as usize));
    let free = free_memory(state, oom.pool, memory_pool);
    let settings = AllocatorSettings::read(snap, super::summary::producer(snap) == "npu");
    let largest = free.by_pool.small.max(free.by_pool.large);
    let mut r = DeviceOom {
        device: dev.device,
        would_fit_if_contiguous: oom
            .request_bytes
            .map(|q| free.in_pool >= round_up_to_granule(q)),
        oom,
        reserved_bytes: state.reserved(),
        allocated_bytes: state.allocated(),
        active_bytes: state.active(),
        requested_bytes: state.requested(),
        cached_free_bytes: free.cached_free,
        cached_free_in_pool_bytes: free.in_pool,
        largest_free_block_bytes: largest,
        fragmentation: if free.cached_free == 0 {
            0.0
        } else {
            1.0 - largest as f64 / free.cached_free as f64
        },
        largest_free_block_by_pool: free.by_pool,
        streams: free.streams,
        request_pool_id: memory_pool,
        other_pools_free_bytes: free.other_pools,
        pools: {
            let mut pools = super::pools::of_state(state);
            super::pools::name_creators(snap, dev, &mut pools);
            pools
        },
        allocator_settings: settings,
        top_holders,
        grew_before: Vec::new(),
        advice: Vec::new(),
        reconstruction_unresolved: state.unresolved,
    };
    let pins = r
        .fragmented_need()
        .map_or_else(Vec::new, |n| pinning(state, n, memory_pool));
    r.advice = advice(&r, &grew_before, guessed, pins);
    r.grew_before = grew_before;
    r
}

impl DeviceOom {
    /// The request rounded to a block, when it failed from fragmentation: it would have
    /// fit in its pool's cached free memory were that one block, and no block was as large.
    pub fn fragmented_need(&self) -> Option<u64> {
        let n = round_up_to_granule(self.oom.request_bytes?);
        (self.would_fit_if_contiguous == Some(true) && self.largest_free_block_bytes < n)
            .then_some(n)
    }
}

/// The explanation of a device without an `oom` event, from the file's final state: its
/// memory at the end and who holds it (the replay names their roles). Growth per window
/// is `leaks`' question.
pub fn explain_end(
    snap: &Snapshot,
    dev: &DeviceView,
    replay: &Replay,
    attr: &mut Attributor,
) -> DeviceOom {
    let state = AllocatorState::at_end(dev);
    let holders = holders(snap, replay, attr, false);
    from_state(
        snap,
        dev,
        oom_event(snap, dev, None),
        &state,
        holders,
        Vec::new(),
        false,
        &mut |_, _, _| Vec::new(),
    )
}

/// The advice the numbers support: fragmentation when the request would have fit in the
/// pool's free memory were it one block (what it says follows the settings: with
/// expandable segments on, the blocks pinning the free space and a smaller peak; off, turn
/// them on, and `max_split_size_mb`, which expandable segments do not use); growth before
/// the failure, unless the windows are a guess (a forward pass's layers filling up is not
/// worth advice); a full device when neither the cache nor the driver could serve the
/// request.
fn advice(r: &DeviceOom, grew: &[GrewBefore], guessed: bool, pinning: Vec<Pinning>) -> Vec<Advice> {
    let mut advice = Vec::new();
    let need = r.oom.request_bytes.map(round_up_to_granule);
    let settings = &r.allocator_settings;
    if let Some(n) = r.fragmented_need() {
        advice.push(Advice::Fragmentation {
            setting: settings.variable,
            settings: settings.clone(),
            pinning,
            cached_free_in_pool_bytes: r.cached_free_in_pool_bytes,
            pool: r.oom.pool.unwrap_or("large"),
            needed_bytes: n,
            largest_free_block_bytes: r.largest_free_block_bytes,
        });
    }
    let trusted = if guessed { None } else { grew.first() };
    if let Some(g) = trusted {
        advice.push(Advice::Growth {
            grew: g.clone(),
            settings: settings.clone(),
        });
    }
    if let (Some(n), Some(false), Some(free)) =
        (need, r.would_fit_if_contiguous, r.oom.device_free_bytes)
        && trusted.is_none()
        && free < n
    {
        advice.push(Advice::DeviceFull {
            settings: settings.clone(),
            needed_bytes: n,
            cached_free_in_pool_bytes: r.cached_free_in_pool_bytes,
            device_free_bytes: free,
        });
    }
    advice
}

/// The live blocks of `state`'s `memory_pool` that keep free blocks apart, grouped by
/// site: a block with free memory on either side in its segment pins it; freeing it would
/// join them (`would_make_room` when that alone reaches `need`).
fn pinning(
    state: &AllocatorState,
    need: u64,
    memory_pool: PoolId,
    replay: &Replay,
    live: Option<u32>,
    attr: &mut Attributor,
) -> Vec<Pinning> {
    let by_addr: crate::model::fxhash::FastMap<u64, usize> = replay
        .live_indices(live)
        .map(|i| (replay.lifetimes[i].addr, i))
        .collect();
    let mut rows: Vec<(u32, Pinning)> = Vec::new();
    for seg in state.segments.iter().filter(|s| s.pool_id == memory_pool) {
        let b = &seg.blocks;
        for j in 0..b.len() {
            if !b[j].active {
                continue;
            }
            let free_at = |k: Option<usize>| {
                k.and_then(|k| b.get(k))
                    .filter(|x| !x.active)
                    .map_or(0, |x| x.size)
            };
            let beside = free_at(j.checked_sub(1)).saturating_add(free_at(Some(j + 1)));
            if beside == 0 {
                continue;
            }
            let Some(&i) = by_addr.get(&b[j].address) else {
                continue;
            };
            let Some(key) = attr.key_of(i, &replay.lifetimes[i]) else {
                continue;
            };
            let room = beside.saturating_add(b[j].size) >= need;
            let row = super::row_of(&mut rows, key, || Pinning {
                site: attr.site(key).clone(),
                role: attr.role_name(i).to_string(),
                blocks: 0,
                bytes: 0,
                free_beside_bytes: 0,
                would_make_room: false,
            });
            row.blocks += 1;
            row.bytes = row.bytes.saturating_add(b[j].requested);
            row.free_beside_bytes = row.free_beside_bytes.saturating_add(beside);
            row.would_make_room |= room;
        }
    }
    let mut rows: Vec<Pinning> = rows.into_iter().map(|(_, r)| r).collect();
    rows.sort_by(|a, b| {
        (b.would_make_room, b.free_beside_bytes).cmp(&(a.would_make_room, a.free_beside_bytes))
    });
    rows.truncate(5);
    rows
}

/// Explains the first `oom` event of `dev` (or its end state when it has none). `before`
/// is the leak finder's report over the windows before the failure.
pub fn explain(
    snap: &Snapshot,
    dev: &DeviceView,
    replay: &Replay,
    attr: &mut Attributor,
    before: &DeviceLeaks,
) -> DeviceOom {
    let idx = replay.ooms.first().copied();
    let state = match idx {
        Some(k) => AllocatorState::after(dev, replay, Some(k)),
        None => AllocatorState::at_end(dev),
    };
    let oom = oom_event(snap, dev, idx);
    let grew_before: Vec<GrewBefore> = before
        .suspects
        .iter()
        .take(5)
        .map(|g| GrewBefore {
            site: g.site.clone(),
            bytes_per_window: g.bytes_per_window,
            windows_growing: g.windows_growing,
            windows_total: g.windows_total,
            kind: g.kind,
        })
        .collect();
    let holders = holders(snap, replay, attr, idx.is_some());
    let holders_attr = &mut *attr;
    let mut pins = |st: &AllocatorState, need: u64, pool: PoolId| {
        pinning(st, need, pool, replay, idx, holders_attr)
    };
    from_state(
        snap,
        dev,
        oom,
        &state,
        holders,
        grew_before,
        before.windows.guessed,
        &mut pins,
    )
}
