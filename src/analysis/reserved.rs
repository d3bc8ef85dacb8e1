//! Reserved growth: cached free memory (reserved minus live) that grows window after
//! window while what the program holds does not. `nvidia-smi` climbs, `leaks` finds no
//! site keeping memory, and the cause is the allocator's cache: blocks cached on streams
//! no later work runs on, a private pool keeping its segments, or free memory in pieces
//! too small for what is asked next.

use serde::Serialize;

use crate::model::fxhash::FastMap;
use crate::model::{BlockState, DeviceView, PoolId};
use crate::replay::Replay;
use crate::windows::Windows;

/// A window grows the cache when both its reserved bytes and its cached free bytes grow
/// by at least this much: one small-pool segment (2 MiB), the least a new segment adds.
pub const MIN_GROWTH_BYTES: u64 = 2 << 20;

/// The verdict needs at least this many growing windows after the first: one or two are
/// the cache warming up to the working set.
pub const MIN_WINDOWS_GROWING: u64 = 3;

/// Of the windows after the first, at least this share must grow: the cache keeps
/// growing, not once in a while. Growth every few windows (once per step under
/// micro-batch windows) counts per period: this share of the periods must grow.
pub const MIN_SHARE_GROWING: f64 = 0.5;

/// Growth every few windows is periodic when at least this share of the gaps between
/// growing windows lie within one window of their median: a step's work recurring, not
/// a cache warming up to ever rarer new maxima (whose gaps widen).
pub const MIN_SHARE_REGULAR_GAPS: f64 = 2.0 / 3.0;

/// The first window fills the cache up to the working set; it counts as growing only when
/// its growth is within this factor of the later windows' median (steady, not warm-up).
pub const FIRST_WINDOW_FACTOR: f64 = 2.0;

/// The second half of the windows must add at least this share of the median growth per
/// window: growth that slows down to nothing is the cache settling, not a cause.
pub const MIN_SHARE_LATE: f64 = 0.5;

/// At least this share of what the growing windows added must still be cached at the
/// end of the last window (memory `empty_cache` gave back is not growth).
pub const MIN_SHARE_KEPT: f64 = 0.5;

/// A cause explains the growth when what it names holds at least this share of the
/// cached free memory added since the onset.
pub const CAUSE_SHARE: f64 = 0.5;

/// Where the growth sits, as far as the snapshot shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// Blocks cached on streams that no later event uses (a fresh stream per call).
    Streams,
    /// Free memory of private pools (CUDA graphs, `MemPool`s), which only they can use.
    Pools,
    /// Free memory in pieces: the largest free block is a small part of it.
    Fragmentation,
    /// Whole free blocks the cache keeps (released by `empty_cache`).
    Cache,
}

/// A stream holding cached free memory at the end.
#[derive(Clone, Debug, Serialize)]
pub struct StreamCache {
    /// Stream.
    pub stream: i64,
    /// Its cached free bytes at the end.
    pub cached_free_bytes: u64,
    /// The last event on it (`None`: none in the trace).
    pub last_event: Option<u32>,
}

/// A private pool holding cached free memory at the end.
#[derive(Clone, Debug, Serialize)]
pub struct PoolCache {
    /// The pool.
    pub pool_id: PoolId,
    /// Its cached free bytes at the end.
    pub cached_free_bytes: u64,
}

/// Cached free memory growing per window on one device.
#[derive(Clone, Debug, Serialize)]
pub struct ReservedGrowth {
    /// Growth per window: the median growth of the growing windows, spread over the
    /// period when the cache grows every few windows (equal to `bytes_per_occurrence`
    /// when it grows every window).
    pub bytes_per_window: u64,
    /// The median growth of the growing windows.
    pub bytes_per_occurrence: u64,
    /// Windows between two growths (median gap), when the cache grows every few windows
    /// rather than every one (`None`: every window).
    pub period_windows: Option<u64>,
    /// Windows that grew it.
    pub windows_growing: u64,
    /// Windows judged.
    pub windows_total: u64,
    /// The first growing window.
    pub onset_window: u64,
    /// Cached free bytes added from the onset to the end of the last window.
    pub added_bytes: u64,
    /// Live (requested) bytes added over the same windows (signed: they may fall).
    pub live_change_bytes: i64,
    /// Where it sits.
    pub cause: Cause,
    /// Streams no later window uses (their last event lies before the last window, or
    /// all their events lie in one window: a stream made for one call), with their cached
    /// free bytes at the end (under [`Cause::Streams`]), most first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamCache>,
    /// Private pools with cached free bytes at the end, most first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolCache>,
    /// The largest free block at the end (under [`Cause::Fragmentation`], far below the
    /// cached free bytes).
    pub largest_free_block_bytes: u64,
    /// Each window's growth of cached free bytes (signed).
    pub per_window: Vec<i64>,
}

/// Reserved and live bytes before event `i` (`i == 0`: before the first event).
fn before(replay: &Replay, i: u32) -> (u64, u64) {
    match i.checked_sub(1) {
        Some(j) => (
            replay.reserved.get(j as usize).copied().unwrap_or(0),
            replay.requested_after(Some(j)),
        ),
        None => (replay.initial_reserved, replay.initial_requested),
    }
}

fn signed(a: u64, b: u64) -> i64 {
    (i128::from(a) - i128::from(b)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The reserved growth of one device, when the rules above find one: windows judged
/// from `warmup` on.
pub fn reserved_growth(
    view: &DeviceView,
    replay: &Replay,
    windows: &Windows,
    warmup: usize,
) -> Option<ReservedGrowth> {
    if !windows.verdicts || replay.reserved.is_empty() {
        return None;
    }
    let judged: Vec<usize> = (warmup.min(windows.len())..windows.len()).collect();
    let mut per_window = Vec::with_capacity(judged.len());
    let mut growing: Vec<(usize, u64)> = Vec::new();
    for &k in &judged {
        let (s, e) = windows.range(k);
        let (r0, l0) = before(replay, s);
        let (r1, l1) = before(replay, e);
        let cached = signed(r1.saturating_sub(l1), r0.saturating_sub(l0));
        let reserved = signed(r1, r0);
        per_window.push(cached);
        let grew = cached.min(reserved);
        if grew >= MIN_GROWTH_BYTES as i64 {
            growing.push((k, grew as u64));
        }
    }
    let first = *judged.first()?;
    let mut steady: Vec<u64> = growing
        .iter()
        .filter(|g| g.0 > first)
        .map(|g| g.1)
        .collect();
    let later = judged.len().saturating_sub(1) as f64;
    // Irregular gaps are still growth when half the windows grow (judged per window).
    let period = period_of(&growing, first)
        .or(((steady.len() as f64) >= MIN_SHARE_GROWING * later).then_some(1))?;
    if (steady.len() as u64) < MIN_WINDOWS_GROWING
        || (steady.len() as f64) < MIN_SHARE_GROWING * later / period as f64
    {
        return None;
    }
    steady.sort_unstable();
    let median = steady[steady.len() / 2];
    let steady_first = |g: u64| {
        g as f64 * FIRST_WINDOW_FACTOR >= median as f64
            && g as f64 <= FIRST_WINDOW_FACTOR * median as f64
    };
    growing.retain(|&(k, g)| k > first || steady_first(g));
    let onset = growing.first()?.0;
    let cached_at = |i: u32| {
        let (r, l) = before(replay, i);
        r.saturating_sub(l)
    };
    let half = windows.range(judged[judged.len() / 2]).0;
    let (last_start, last_end) = windows.range(windows.len() - 1);
    let late_windows = (judged.len() - judged.len() / 2) as f64;
    let late = cached_at(last_end).saturating_sub(cached_at(half)) as f64;
    if late < MIN_SHARE_LATE * median as f64 * late_windows / period as f64 {
        return None;
    }
    let (s, _) = windows.range(onset);
    let (r0, l0) = before(replay, s);
    let (r1, l1) = before(replay, last_end);
    let added = r1.saturating_sub(l1).saturating_sub(r0.saturating_sub(l0));
    let grown: u64 = growing.iter().map(|g| g.1).sum();
    let live_change = signed(l1, l0);
    if (added as f64) < MIN_SHARE_KEPT * grown as f64 || live_change >= added as i64 {
        return None;
    }
    let mut rates: Vec<u64> = growing.iter().map(|g| g.1).collect();
    rates.sort_unstable();
    let end = EndCache::of(view);
    let mut streams: Vec<StreamCache> = Vec::new();
    let spans = stream_spans(view);
    for (&stream, &bytes) in &end.by_stream {
        let span = spans.get(&stream).copied();
        let last_event = span.map(|(_, l)| l);
        let one_window = span.is_some_and(|(f, l)| {
            let k = windows.of_event(f);
            k.is_some() && k == windows.of_event(l)
        });
        if bytes > 0 && (one_window || last_event.is_none_or(|l| l < last_start)) {
            streams.push(StreamCache {
                stream,
                cached_free_bytes: bytes,
                last_event,
            });
        }
    }
    streams.sort_by(|a, b| {
        b.cached_free_bytes
            .cmp(&a.cached_free_bytes)
            .then(a.stream.cmp(&b.stream))
    });
    let mut pools: Vec<PoolCache> = end
        .by_pool
        .iter()
        .filter(|(p, b)| p.is_private() && **b > 0)
        .map(|(&pool_id, &cached_free_bytes)| PoolCache {
            pool_id,
            cached_free_bytes,
        })
        .collect();
    pools.sort_by(|a, b| {
        b.cached_free_bytes
            .cmp(&a.cached_free_bytes)
            .then(a.pool_id.cmp(&b.pool_id))
    });
    let explains = |bytes: u64| bytes as f64 >= CAUSE_SHARE * added as f64;
    let cause = if explains(streams.iter().map(|s| s.cached_free_bytes).sum()) {
        Cause::Streams
    } else if explains(pools.iter().map(|p| p.cached_free_bytes).sum()) {
        Cause::Pools
    } else if (end.largest as f64) < (1.0 - CAUSE_SHARE) * end.cached as f64 {
        Cause::Fragmentation
    } else {
        Cause::Cache
    };
    if cause != Cause::Streams {
        streams.clear();
    }
    let occurrence = rates[rates.len() / 2];
    Some(ReservedGrowth {
        bytes_per_window: occurrence / period,
        bytes_per_occurrence: occurrence,
        period_windows: (period > 1).then_some(period),
        windows_growing: growing.len() as u64,
        windows_total: judged.len() as u64,
        onset_window: onset as u64,
        added_bytes: added,
        live_change_bytes: live_change,
        cause,
        streams,
        pools,
        largest_free_block_bytes: end.largest,
        per_window,
    })
}

/// Windows between two growths of the windows after the first: the median gap, when at
/// least [`MIN_SHARE_REGULAR_GAPS`] of the gaps lie within one window of it (`Some(1)`:
/// consecutive windows; `None`: growth at irregular gaps, judged as not recurring).
fn period_of(growing: &[(usize, u64)], first: usize) -> Option<u64> {
    let ks: Vec<usize> = growing.iter().map(|g| g.0).filter(|&k| k > first).collect();
    let mut gaps: Vec<u64> = ks.windows(2).map(|p| (p[1] - p[0]) as u64).collect();
    if gaps.is_empty() {
        return Some(1);
    }
    gaps.sort_unstable();
    let p = gaps[gaps.len() / 2];
    if p <= 1 {
        return Some(1);
    }
    let regular = gaps.iter().filter(|&&g| g.abs_diff(p) <= 1).count();
    (regular as f64 >= MIN_SHARE_REGULAR_GAPS * gaps.len() as f64).then_some(p)
}

/// The cached free memory of the final segments, per stream and per pool.
struct EndCache {
    by_stream: FastMap<i64, u64>,
    by_pool: FastMap<PoolId, u64>,
    cached: u64,
    largest: u64,
}

impl EndCache {
    fn of(view: &DeviceView) -> EndCache {
        let mut c = EndCache {
            by_stream: FastMap::default(),
            by_pool: FastMap::default(),
            cached: 0,
            largest: 0,
        };
        for seg in &view.segments {
            for b in seg
                .blocks
                .iter()
                .filter(|b| b.state == BlockState::Inactive)
            {
                *c.by_stream.entry(seg.stream.unwrap_or(0)).or_default() += b.size;
                *c.by_pool.entry(seg.pool()).or_default() += b.size;
                c.cached = c.cached.saturating_add(b.size);
                c.largest = c.largest.max(b.size);
            }
        }
        c
    }
}

/// The first and last event on each stream.
fn stream_spans(view: &DeviceView) -> FastMap<i64, (u32, u32)> {
    let mut spans: FastMap<i64, (u32, u32)> = FastMap::default();
    for i in 0..view.trace.len() {
        let at = i as u32;
        spans
            .entry(view.stream_of(i))
            .and_modify(|s| s.1 = at)
            .or_insert((at, at));
    }
    spans
}
