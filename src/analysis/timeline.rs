//! Memory over time, sized for charts. A trace can hold ten million events; a chart needs
//! a few thousand points. Live and reserved bytes are decimated per bucket of events
//! keeping each bucket's extremes (so no peak and no dip disappears), and the bytes of the
//! largest sites are sampled at evenly spaced events.

use serde::Serialize;

use crate::attribute::{Attributor, Site};
use crate::replay::Replay;

/// Live and reserved bytes at selected events, in event order.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    /// Event indices of the points.
    pub events: Vec<u32>,
    /// Requested bytes after each of those events.
    pub requested: Vec<u64>,
    /// Reserved bytes after each of those events.
    pub reserved: Vec<u64>,
    /// Requested bytes before the first event (the only point of a device without trace
    /// events).
    pub initial_requested: u64,
    /// Reserved bytes before the first event.
    pub initial_reserved: u64,
    /// Events in the whole trace.
    pub total_events: u32,
    /// Buckets the trace was cut into (each gives up to four points).
    pub buckets: u32,
}

/// Decimates `replay`'s timelines to at most `4 * max_buckets` points. Each bucket of
/// consecutive events keeps the events where live bytes are lowest and highest and where
/// reserved bytes are lowest and highest; the first and last events are always kept.
pub fn timeline(replay: &Replay, max_buckets: usize) -> Timeline {
    let n = replay.requested.len();
    let mut t = Timeline {
        initial_requested: replay.initial_requested,
        initial_reserved: replay.initial_reserved,
        total_events: n as u32,
        ..Default::default()
    };
    if n == 0 {
        return t;
    }
    let per = n.div_ceil(max_buckets.max(1));
    let mut picks: Vec<usize> = Vec::with_capacity(4 * max_buckets + 2);
    let mut start = 0;
    while start < n {
        let end = (start + per).min(n);
        let (mut lo, mut hi, mut rlo, mut rhi) = (start, start, start, start);
        for i in start..end {
            // Strict comparisons keep the first event of a plateau, so the peak point is
            // the same event `top --at peak` reports.
            if replay.requested[i] < replay.requested[lo] {
                lo = i;
            }
            if replay.requested[i] > replay.requested[hi] {
                hi = i;
            }
            if replay.reserved[i] < replay.reserved[rlo] {
                rlo = i;
            }
            if replay.reserved[i] > replay.reserved[rhi] {
                rhi = i;
            }
        }
        let before = picks.len();
        picks.extend([lo, hi, rlo, rhi]);
        picks[before..].sort_unstable();
        t.buckets += 1;
        start = end;
    }
    picks.push(n - 1);
    picks.sort_unstable();
    picks.dedup();
    for i in picks {
        t.events.push(i as u32);
        t.requested.push(replay.requested[i]);
        t.reserved.push(replay.reserved[i]);
    }
    t
}

/// One site's live bytes at the sample events.
#[derive(Clone, Debug, Serialize)]
pub struct SiteLine {
    /// The site (as in `top`).
    pub site: Site,
    /// Its bytes at the peak of live bytes (the ranking).
    pub bytes_at_peak: u64,
    /// Live bytes after each sample event.
    pub bytes: Vec<u64>,
}

/// The largest sites' live bytes over the trace, plus everything else.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SiteSeries {
    /// Sample events, evenly spaced over the trace (first and last included).
    pub events: Vec<u32>,
    /// The sites with the most bytes at the peak, largest first.
    pub sites: Vec<SiteLine>,
    /// All other allocations (other sites, and those `--focus` leaves out are not here).
    pub other: Vec<u64>,
}

/// Samples the live bytes of the `k` sites largest at the peak at `samples` events.
/// At each sample, the sites and `other` add up to the live bytes the allocations counted
/// by `attr` hold (all of them, without `--focus`).
pub fn site_series(replay: &Replay, attr: &mut Attributor, k: usize, samples: usize) -> SiteSeries {
    let n = replay.requested.len();
    if n == 0 || samples == 0 {
        return SiteSeries::default();
    }
    let s = samples.min(n).max(1);
    let events: Vec<u32> = if s == 1 {
        vec![(n - 1) as u32]
    } else {
        (0..s)
            .map(|j| ((j as u64 * (n as u64 - 1)) / (s as u64 - 1)) as u32)
            .collect()
    };

    let RankedSites {
        keys,
        ranked,
        at_peak,
        slot_of,
    } = rank_sites(replay, attr, k);

    // Difference arrays over the samples: +bytes at the first sample the allocation is
    // alive at, -bytes at the first sample after it is freed.
    let slots = ranked.len() + 1;
    let mut diff = vec![0i128; slots * (s + 1)];
    for (l, key) in replay.lifetimes.iter().zip(&keys) {
        let Some(key) = key else { continue };
        let slot = slot_of
            .get(*key as usize)
            .copied()
            .unwrap_or(slots - 1)
            .min(slots - 1);
        // Alive after event e when born <= e < freed.
        let from = match l.first_alive() {
            Some(b) => events.partition_point(|&e| e < b),
            None => 0,
        };
        let to = match l.freed {
            Some(f) => events.partition_point(|&e| e < f),
            None => s,
        };
        if from < to {
            diff[slot * (s + 1) + from] += l.bytes as i128;
            diff[slot * (s + 1) + to] -= l.bytes as i128;
        }
    }
    let series = |slot: usize| -> Vec<u64> {
        let mut cur = 0i128;
        diff[slot * (s + 1)..slot * (s + 1) + s]
            .iter()
            .map(|d| {
                cur += d;
                // Past 64 bits only in an impossible file: stopped at the top.
                u64::try_from(cur.max(0)).unwrap_or(u64::MAX)
            })
            .collect()
    };
    SiteSeries {
        sites: ranked
            .iter()
            .enumerate()
            .map(|(slot, &key)| SiteLine {
                site: attr.site(key).clone(),
                bytes_at_peak: at_peak[key as usize],
                bytes: series(slot),
            })
            .collect(),
        other: series(slots - 1),
        events,
    }
}

/// The sites with the most bytes alive at the peak, and the key of every allocation.
pub(crate) struct RankedSites {
    /// The site key of each lifetime (`None`: left out by the filters).
    pub keys: Vec<Option<u32>>,
    /// The `k` largest keys at the peak, largest first (ties by label).
    pub ranked: Vec<u32>,
    /// Bytes alive at the peak per key.
    pub at_peak: Vec<u64>,
    /// Each key's place in `ranked` (`k` or more: not ranked).
    pub slot_of: Vec<usize>,
}

/// Ranks the sites of `replay`'s allocations by their bytes alive at the peak of live
/// bytes and keeps the `k` largest.
pub(crate) fn rank_sites(replay: &Replay, attr: &mut Attributor, k: usize) -> RankedSites {
    let peak = replay.peak().0;
    let mut at_peak: Vec<u64> = Vec::new();
    let mut keys: Vec<Option<u32>> = Vec::with_capacity(replay.lifetimes.len());
    for (li, l) in replay.lifetimes.iter().enumerate() {
        let key = attr.key_of(li, l);
        keys.push(key);
        if let Some(k) = key
            && l.alive_after(peak)
        {
            let k = k as usize;
            if at_peak.len() <= k {
                at_peak.resize(k + 1, 0);
            }
            at_peak[k] = at_peak[k].saturating_add(l.bytes);
        }
    }
    let mut ranked: Vec<u32> = (0..at_peak.len() as u32)
        .filter(|&i| at_peak[i as usize] > 0)
        .collect();
    ranked.sort_by(|&a, &b| {
        at_peak[b as usize]
            .cmp(&at_peak[a as usize])
            .then_with(|| attr.site(a).label.cmp(&attr.site(b).label))
    });
    ranked.truncate(k);
    let mut slot_of: Vec<usize> = vec![usize::MAX; at_peak.len().max(1)];
    for (slot, &key) in ranked.iter().enumerate() {
        slot_of[key as usize] = slot;
    }
    RankedSites {
        keys,
        ranked,
        at_peak,
        slot_of,
    }
}
