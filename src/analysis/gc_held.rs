//! Memory held until garbage collection: tensors caught in reference cycles stay alive
//! until Python's collector runs, then go in one burst. The memory is a sawtooth, not a
//! leak, and the fix is different (break the cycle, or `gc.collect()` at a boundary), so
//! it is named on its own rather than counted as `retained`.
//!
//! Rules (each a doc line on its constant below): a collection is a burst of frees with
//! no allocation between them, of allocations born in earlier windows, whose free stacks
//! show CPython's collector. Only the collector's frames tell: a burst in the middle of a
//! window that frees what several earlier windows kept is also what a program does when
//! it clears a list of kept outputs (the pipeline case's `model_output` list is released
//! that way), so without those frames (`stacks="python"`) nothing is called gc-held.

use serde::Serialize;

use crate::attribute::{Attributor, Site};
use crate::model::fxhash::FastMap;
use crate::model::{Action, Snapshot, StackId};
use crate::replay::Replay;
use crate::windows::Windows;

/// CPython's collector functions (3.8-3.13): a free whose stack holds one of these was
/// done by the garbage collector.
pub const COLLECTOR_FRAMES: &[&str] = &[
    "gc_collect_main",
    "gc_collect_impl",
    "gc_collect_with_callback",
    "collect_with_callback",
    "collect_generations",
    "gc_collect_region",
    "_PyGC_Collect",
    "PyGC_Collect",
    "_Py_RunGC",
];

/// A burst frees at least this many allocations (one free is a `del`, not a collection).
pub const MIN_BURST_FREES: usize = 2;

/// A site whose memory the collector freed.
#[derive(Clone, Debug, Serialize)]
pub struct GcSite {
    /// Where the memory was allocated.
    pub site: Site,
    /// Requested bytes freed by collections, summed over them.
    pub bytes: u64,
    /// Allocations freed by collections.
    pub blocks: u64,
    /// The most windows one of them stayed alive past its own.
    pub windows_held_max: u64,
}

/// Memory held until garbage collection, on one device.
#[derive(Clone, Debug, Serialize)]
pub struct GcHeld {
    /// Collections found.
    pub collections: u64,
    /// The first free event of each.
    pub event_indices: Vec<u32>,
    /// Requested bytes each freed.
    pub bytes_per_collection: Vec<u64>,
    /// The window holding each (`None` outside every window).
    pub windows: Vec<Option<u64>>,
    /// Windows between collections, when constant.
    pub period_windows: Option<u64>,
    /// The sites of what they freed, most bytes first.
    pub sites: Vec<GcSite>,
}

/// The stacks of `snap` that hold a collector frame (empty, and cheap, when no frame is
/// one).
fn collector_stacks(snap: &Snapshot) -> Vec<bool> {
    let frames: Vec<bool> = snap
        .frames
        .iter()
        .map(|f| COLLECTOR_FRAMES.contains(&snap.strings.get(f.name)))
        .collect();
    if !frames.iter().any(|&c| c) {
        return Vec::new();
    }
    (0..snap.stacks.len())
        .map(|s| {
            snap.stacks
                .get(StackId(s as u32))
                .iter()
                .any(|f| frames.get(f.index()).copied().unwrap_or(false))
        })
        .collect()
}

/// One burst: the lifetimes it freed, its first event, its free stack.
struct Burst {
    first: u32,
    stack: StackId,
    lifes: Vec<usize>,
}

/// The collections of one device and what they freed; `None` when there are none.
pub fn gc_held(replay: &Replay, windows: &Windows, attr: &mut Attributor) -> Option<GcHeld> {
    if !windows.verdicts || windows.is_empty() {
        return None;
    }
    let snap = attr.snapshot();
    let trace = snap.trace(replay.device);
    let marked = collector_stacks(snap);
    if marked.is_empty() {
        return None; // no frame is the collector's: nothing below can be a collection
    }
    // The lifetime each free event ends, for allocations born in an earlier window.
    let mut ended: FastMap<u32, usize> = FastMap::default();
    for (i, l) in replay.lifetimes.iter().enumerate() {
        let Some(f) = l.free_requested.or(l.freed) else {
            continue;
        };
        let born = l.first_alive().and_then(|b| windows.of_event(b));
        let died = windows.of_event(f);
        if let (Some(b), Some(d)) = (born, died)
            && b < d
        {
            ended.insert(f, i);
        }
    }
    if ended.is_empty() {
        return None;
    }
    let is_marked = |s: StackId| marked.get(s.index()).copied().unwrap_or(false);
    let mut bursts: Vec<Burst> = Vec::new();
    let mut open: Option<Burst> = None;
    for i in 0..trace.len() {
        match trace.action[i] {
            Action::ALLOC => {
                bursts.extend(open.take());
            }
            Action::FREE_REQUESTED | Action::FREE_COMPLETED => {
                let stack = trace.stack[i];
                let Some(&life) = ended.get(&(i as u32)) else {
                    if trace.action[i] == Action::FREE_REQUESTED {
                        bursts.extend(open.take());
                    }
                    continue;
                };
                match &mut open {
                    Some(b) if b.stack == stack => b.lifes.push(life),
                    _ => {
                        bursts.extend(open.take());
                        open = Some(Burst {
                            first: i as u32,
                            stack,
                            lifes: vec![life],
                        });
                    }
                }
            }
            _ => {}
        }
    }
    bursts.extend(open);
    bursts.retain(|b| b.lifes.len() >= MIN_BURST_FREES);
    let found: Vec<&Burst> = bursts.iter().filter(|b| is_marked(b.stack)).collect();
    if found.is_empty() {
        return None;
    }
    Some(describe(replay, windows, attr, &found))
}

fn describe(replay: &Replay, windows: &Windows, attr: &mut Attributor, found: &[&Burst]) -> GcHeld {
    let mut sites: Vec<(u32, GcSite)> = Vec::new();
    let mut bytes_per_collection = Vec::with_capacity(found.len());
    for b in found {
        let mut bytes = 0u64;
        let died = windows.of_event(b.first).unwrap_or(0);
        for &i in &b.lifes {
            let l = &replay.lifetimes[i];
            bytes = bytes.saturating_add(l.bytes);
            let Some(key) = attr.key_of(i, l) else {
                continue;
            };
            let held = l
                .first_alive()
                .and_then(|e| windows.of_event(e))
                .map_or(0, |born| died.saturating_sub(born) as u64);
            let row = super::row_of(&mut sites, key, || GcSite {
                site: attr.site(key).clone(),
                bytes: 0,
                blocks: 0,
                windows_held_max: 0,
            });
            row.bytes = row.bytes.saturating_add(l.bytes);
            row.blocks += 1;
            row.windows_held_max = row.windows_held_max.max(held);
        }
        bytes_per_collection.push(bytes);
    }
    let mut sites: Vec<GcSite> = sites.into_iter().map(|(_, s)| s).collect();
    sites.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then_with(|| a.site.label.cmp(&b.site.label))
    });
    let at: Vec<Option<u64>> = found
        .iter()
        .map(|b| windows.of_event(b.first).map(|k| k as u64))
        .collect();
    let gaps: Vec<u64> = at
        .windows(2)
        .filter_map(|p| p[1]?.checked_sub(p[0]?))
        .collect();
    let period = match gaps.first() {
        Some(&g) if g > 0 && gaps.iter().all(|&x| x == g) => Some(g),
        _ => None,
    };
    GcHeld {
        collections: found.len() as u64,
        event_indices: found.iter().map(|b| b.first).collect(),
        bytes_per_collection,
        windows: at,
        period_windows: period,
        sites,
    }
}
