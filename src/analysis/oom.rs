//! `leakscope oom`: why an allocation failed. The allocator's state is reconstructed at the
//! `oom` event (OOM dumps go on past it: the exception unwinds and frees, `empty_cache`
//! releases segments), then: what was asked, what the driver had, what the cache held
//! free and in what pieces, who held the rest, what grew before, and what to do about it
//! when the numbers say so.

use serde::Serialize;

use super::leaks::LeakReport;
use super::top::{self, TopReport};
use crate::attribute::Attributor;
use crate::model::{Action, DeviceView, Snapshot};

/// The device to explain when none is named: the first one whose trace has an `oom`
/// event, else the default device.
pub fn oom_device(snap: &Snapshot) -> i64 {
    snap.devices()
        .iter()
        .find(|d| d.trace.action.contains(&Action::OOM))
        .map_or_else(|| super::default_device(snap), |d| d.device)
}
use crate::replay::{AllocatorState, Replay};
use crate::windows::Windows;

/// JSON schema name of [`OomReport`].
pub const SCHEMA: &str = "leakscope.oom/1";

/// The failed request.
#[derive(Clone, Debug, Serialize)]
pub struct OomEvent {
    /// Whether the trace has an `oom` event (otherwise the end state is explained).
    pub found: bool,
    /// Its index in the device's trace.
    pub event_index: Option<u32>,
    /// Bytes requested by the failed allocation.
    pub requested_bytes: Option<u64>,
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
    /// The grouping key.
    pub site: String,
    /// Live requested bytes.
    pub bytes: u64,
    /// Allocations.
    pub blocks: u64,
}

/// The `oom` report (`leakscope.oom/1`).
#[derive(Clone, Debug, Serialize)]
pub struct OomReport {
    /// Schema name.
    pub schema: &'static str,
    /// Device.
    pub device: i64,
    /// The failed request.
    pub oom: OomEvent,
    /// Reserved bytes (segments) at the failure.
    pub reserved_bytes: u64,
    /// Σ block sizes held by the program.
    pub allocated_bytes: u64,
    /// Σ bytes the program asked for (allocated minus rounding).
    pub requested_live_bytes: u64,
    /// Reserved but not held: cached free blocks.
    pub cached_free_bytes: u64,
    /// Cached free bytes in the request's pool.
    pub cached_free_in_pool_bytes: u64,
    /// The largest cached free block.
    pub largest_free_block_bytes: u64,
    /// The largest free block per pool.
    pub largest_free_block_by_pool: PoolFree,
    /// Per stream.
    pub streams: Vec<StreamFree>,
    /// `1 - largest free block / cached free` (0 when nothing is cached free).
    pub fragmentation: f64,
    /// Whether the request would have fit in the request pool's cached free memory, were
    /// it one block.
    pub would_fit_if_contiguous: Option<bool>,
    /// Who held memory at the failure, largest first.
    pub top_holders: Vec<Holder>,
    /// Sites that grew per window before the failure (the leak finder's suspects).
    pub grew_before: Vec<Holder>,
    /// What to do, only where the numbers support it.
    pub advice: Vec<String>,
    /// Events the state reconstruction could not undo (0 when the trace is complete).
    pub reconstruction_unresolved: u64,
}

fn round_block(size: u64) -> u64 {
    size.max(1).div_ceil(512) * 512
}

/// [`explain`] with the leak finder run over the windows before the failure, as `oom`
/// and `report` both want it.
pub fn explain_with_growth(
    snap: &Snapshot,
    dev: &DeviceView,
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
) -> OomReport {
    let before = windows_before(windows, replay);
    let growth = super::leaks::leaks(replay, &before, attr, &super::leaks::LeakOptions::default());
    explain(snap, dev, replay, attr, &growth)
}

/// Explains the first `oom` event of `dev` (or its end state when it has none). `leaks`
/// is the leak finder's report over the windows before the failure.
pub fn explain(
    snap: &Snapshot,
    dev: &DeviceView,
    replay: &Replay,
    attr: &mut Attributor,
    leaks: &LeakReport,
) -> OomReport {
    let trace = dev.trace;
    let idx = replay.ooms.first().copied();
    let state = match idx {
        Some(k) => AllocatorState::after(dev, Some(k)),
        None => AllocatorState::at_end(dev),
    };
    let (requested, device_free, time_us) = match idx {
        Some(k) => {
            let m = snap.meta(trace.meta[k as usize]);
            (
                Some(trace.size[k as usize]),
                m.has(crate::model::flags::DEVICE_FREE)
                    .then_some(trace.addr[k as usize]),
                m.has(crate::model::flags::TIME)
                    .then_some(trace.time_us[k as usize]),
            )
        }
        None => (None, None, None),
    };
    let pool = requested.map(|r| if r <= 1 << 20 { "small" } else { "large" });
    let reserved = state.reserved();
    let allocated = state.allocated();
    let mut by_pool = PoolFree::default();
    let mut cached_free = 0u64;
    let mut in_pool = 0u64;
    let mut streams: Vec<StreamFree> = Vec::new();
    for (seg, b) in state.blocks() {
        if b.active {
            continue;
        }
        cached_free += b.size;
        let small = seg.pool == "small";
        let slot = if small {
            &mut by_pool.small
        } else {
            &mut by_pool.large
        };
        *slot = (*slot).max(b.size);
        if pool == Some(if small { "small" } else { "large" }) {
            in_pool += b.size;
        }
        match streams.iter_mut().find(|s| s.stream == seg.stream) {
            Some(s) => {
                s.largest_free_block_bytes = s.largest_free_block_bytes.max(b.size);
                s.cached_free_bytes += b.size;
            }
            None => streams.push(StreamFree {
                stream: seg.stream,
                largest_free_block_bytes: b.size,
                cached_free_bytes: b.size,
            }),
        }
    }
    streams.sort_by_key(|s| s.stream);
    let largest = by_pool.small.max(by_pool.large);
    let fragmentation = if cached_free == 0 {
        0.0
    } else {
        1.0 - largest as f64 / cached_free as f64
    };
    let need = requested.map(round_block);
    let would_fit = need.map(|n| in_pool >= n);

    // Holders at the failure, by the attributor's key.
    let at = match idx {
        Some(_) => top::At::Oom,
        None => top::At::End,
    };
    let holders: Vec<Holder> = top::resolve(snap, replay, at)
        .map(|p| {
            let r: TopReport = top::top(replay, p, attr, 10);
            r.rows
                .into_iter()
                .map(|x| Holder {
                    site: x.key,
                    bytes: x.bytes,
                    blocks: x.blocks,
                })
                .collect()
        })
        .unwrap_or_default();
    let grew_before: Vec<Holder> = leaks
        .suspects
        .iter()
        .take(5)
        .map(|g| Holder {
            site: g.key.clone(),
            bytes: g.bytes_per_window,
            blocks: g.windows_growing,
        })
        .collect();

    let mut advice = Vec::new();
    let conf = if crate::analysis::summary::producer(snap) == "npu" {
        "PYTORCH_NPU_ALLOC_CONF"
    } else {
        "PYTORCH_CUDA_ALLOC_CONF"
    };
    if let (Some(n), Some(true)) = (need, would_fit)
        && largest < n
    {
        advice.push(format!(
            "fragmentation: {} of cached free memory in the {} pool would have held the {} request, but the largest free block is {}. Set {conf}=expandable_segments:True so freed memory can be mapped contiguously (or max_split_size_mb to stop large blocks being split).",
            crate::render::bytes(in_pool),
            pool.unwrap_or("large"),
            crate::render::bytes(n),
            crate::render::bytes(largest)
        ));
    }
    // Growth over windows auto guessed from a repeating function may be one forward pass's
    // layers filling up: not worth advice.
    let trusted: Vec<_> = if leaks.windows.guessed {
        Vec::new()
    } else {
        leaks.suspects.iter().collect()
    };
    if let Some(g) = trusted.first() {
        advice.push(format!(
            "memory grew before the failure: {} keeps {} per window ({}, {} of {} windows); fix that first (`leakscope leaks`).",
            g.key,
            crate::render::bytes(g.bytes_per_window),
            g.kind,
            g.windows_growing,
            g.windows_total
        ));
    }
    if let (Some(n), Some(false)) = (need, would_fit)
        && trusted.is_empty()
        && device_free.is_some_and(|f| f < n)
    {
        advice.push(format!(
            "the device was full: the request ({}) exceeded both the cached free memory of its pool ({}) and what the driver had free ({}); the working set itself is too large (smaller batches or sequences, activation checkpointing, sharding).",
            crate::render::bytes(n),
            crate::render::bytes(in_pool),
            crate::render::bytes(device_free.unwrap_or(0))
        ));
    }
    OomReport {
        schema: SCHEMA,
        device: dev.device,
        oom: OomEvent {
            found: idx.is_some(),
            event_index: idx,
            requested_bytes: requested,
            device_free_bytes: device_free,
            time_us,
            pool,
        },
        reserved_bytes: reserved,
        allocated_bytes: allocated,
        requested_live_bytes: state.requested(),
        cached_free_bytes: cached_free,
        cached_free_in_pool_bytes: in_pool,
        largest_free_block_bytes: largest,
        largest_free_block_by_pool: by_pool,
        streams,
        fragmentation,
        would_fit_if_contiguous: would_fit,
        top_holders: holders,
        grew_before,
        advice,
        reconstruction_unresolved: state.unresolved,
    }
}

/// The windows before the failure (the leak finder looks only there).
pub fn windows_before(w: &Windows, replay: &Replay) -> Windows {
    match replay.ooms.first() {
        Some(&k) => w.restrict(&[(0, k + 1)], "the events before the oom"),
        None => w.clone(),
    }
}
