//! Memory counters over a whole trace, for a timeline viewer: live (requested),
//! allocated and reserved bytes, and the live bytes of the largest sites with everything
//! else as "other". A trace of ten million events would make a viewer crawl, so each
//! series is decimated on its own: the trace is cut into buckets of consecutive events
//! and each bucket keeps the events where the series is lowest and highest. Extremes are
//! therefore exact (the peak is the replay's peak to the byte); between kept points a
//! viewer holds the last value, as a counter does.

use serde::Serialize;

use super::timeline::rank_sites;
use crate::attribute::{Attributor, Site};
use crate::model::fxhash::FastMap;
use crate::model::size::{round_up_to_granule, sum_sizes};
use crate::replay::{Lifetime, Replay};

/// One decimated series: its value before the first event, then `(event, value after
/// that event)` at the events kept, in event order. A point is left out where the value
/// equals the previous one kept (a counter holds its value).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Series {
    /// Bytes before the first event.
    pub initial: u64,
    /// `(event index, bytes after it)`.
    pub points: Vec<(u32, u64)>,
}

/// One site's series.
#[derive(Clone, Debug, Serialize)]
pub struct SiteCounter {
    /// The site (as in `top`).
    pub site: Site,
    /// Its bytes alive at the peak of live bytes (the ranking).
    pub bytes_at_peak: u64,
    /// Its live bytes.
    pub series: Series,
}

/// A device's counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    /// Live (requested) bytes, as the replay counts them.
    pub live: Series,
    /// Allocated bytes: blocks of allocations alive and not pending free (a block's size
    /// is its final size when still allocated at the end, else the request rounded up to
    /// the allocator's 512 bytes).
    pub allocated: Series,
    /// Reserved bytes (segments).
    pub reserved: Series,
    /// The sites with the most live bytes at the peak, largest first.
    pub sites: Vec<SiteCounter>,
    /// Live bytes of every other allocation (live minus the sites above).
    pub other: Series,
    /// Buckets the trace was cut into.
    pub buckets: u32,
}

/// The running extremes of one series in the current bucket.
#[derive(Clone, Copy)]
/// The lowest and highest points of a bucket of a series, and the last value written:
/// decimation that keeps every peak and dip.
pub(crate) struct Extremes {
    lo: (u32, u64),
    hi: (u32, u64),
    /// The last value written.
    pub(crate) last: u64,
}

impl Extremes {
    pub(crate) fn new(initial: u64) -> Extremes {
        Extremes {
            lo: (0, initial),
            hi: (0, initial),
            last: initial,
        }
    }

    pub(crate) fn start(&mut self, i: u32, v: u64) {
        self.lo = (i, v);
        self.hi = (i, v);
    }

    /// Strict comparisons keep the first event of a plateau (the event `top --at peak`
    /// reports).
    pub(crate) fn see(&mut self, i: u32, v: u64) {
        if v < self.lo.1 {
            self.lo = (i, v);
        }
        if v > self.hi.1 {
            self.hi = (i, v);
        }
    }

    pub(crate) fn flush(&mut self, out: &mut Vec<(u32, u64)>) {
        let (a, b) = if self.lo.0 <= self.hi.0 {
            (self.lo, self.hi)
        } else {
            (self.hi, self.lo)
        };
        for p in [a, b] {
            if p.1 != self.last {
                out.push(p);
                self.last = p.1;
            }
        }
    }
}

/// The largest change one entry of [`Changes`] holds (its low byte is the target): a
/// lifetime's bytes beyond it (32 PiB, only in an impossible file) count as this.
const MAX_CHANGE: u64 = (i64::MAX >> 8) as u64;

/// `bytes` as a change entry takes it.
fn change(bytes: u64) -> i64 {
    bytes.min(MAX_CHANGE) as i64
}

/// Changes of the diff-counted series, by event: `(delta << 8) | target`, where target
/// `t < 255` is the site slot `t` and 255 is the allocated series.
struct Changes {
    offsets: Vec<u32>,
    entries: Vec<i64>,
}

const ALLOCATED: u8 = u8::MAX;

impl Changes {
    /// The changes of every lifetime (`slots[i]`: lifetime `i`'s site slot, or
    /// [`ALLOCATED`] for none), with the values before the first event added to
    /// `initial` (per slot) and `initial_allocated`.
    fn of(
        replay: &Replay,
        slots: &[u8],
        final_blocks: &FastMap<u64, u64>,
        initial: &mut [i128],
        initial_allocated: &mut i128,
    ) -> Changes {
        let n = replay.len();
        for (l, &slot) in replay.lifetimes.iter().zip(slots) {
            if l.first_alive().is_none() {
                if slot != ALLOCATED {
                    initial[slot as usize] += i128::from(change(l.bytes));
                }
                *initial_allocated += i128::from(change(block_size(l, final_blocks)));
            }
        }
        // Two passes over the same changes: count per event, then place.
        let visit = |f: &mut dyn FnMut(u32, u8, i64)| {
            for (l, &slot) in replay.lifetimes.iter().zip(slots) {
                let bytes = change(l.bytes);
                let block = change(block_size(l, final_blocks));
                let inside = |e: &u32| (*e as usize) < n;
                if let Some(b) = l.first_alive() {
                    if !inside(&b) {
                        continue; // born after the last event
                    }
                    if slot != ALLOCATED {
                        f(b, slot, bytes);
                    }
                    f(b, ALLOCATED, block);
                }
                if slot != ALLOCATED
                    && let Some(e) = l.freed.filter(inside)
                {
                    f(e, slot, -bytes);
                }
                // Pending free from `free_requested` on: no longer allocated.
                let unallocated = match (l.free_requested, l.freed) {
                    (Some(r), Some(f)) => Some(r.min(f)),
                    (r, f) => r.or(f),
                };
                if let Some(e) = unallocated.filter(inside) {
                    f(e, ALLOCATED, -block);
                }
            }
        };
        let mut offsets = vec![0u32; n + 1];
        visit(&mut |e, _, _| offsets[e as usize + 1] += 1);
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut entries = vec![0i64; offsets[n] as usize];
        let mut fill: Vec<u32> = offsets[..n].to_vec();
        visit(&mut |e, t, d| {
            let k = &mut fill[e as usize];
            entries[*k as usize] = (d << 8) | i64::from(t);
            *k += 1;
        });
        Changes { offsets, entries }
    }
}

fn block_size(l: &Lifetime, final_blocks: &FastMap<u64, u64>) -> u64 {
    l.freed
        .is_none()
        .then(|| final_blocks.get(&l.addr).copied())
        .flatten()
        .unwrap_or_else(|| round_up_to_granule(l.bytes))
}

/// The counters of `replay`, each series cut into at most `max_buckets` buckets of
/// events, with the `k` largest sites at the peak (at most 254) under `attr`.
/// `final_blocks` maps the address of each block allocated in the final segments to its
/// size.
pub fn counters(
    replay: &Replay,
    attr: &mut Attributor,
    final_blocks: &FastMap<u64, u64>,
    k: usize,
    max_buckets: usize,
) -> Counters {
    let k = k.min(254);
    let ranked = rank_sites(replay, attr, k);
    let slots: Vec<u8> = ranked
        .keys
        .iter()
        .map(|key| {
            key.and_then(|key| ranked.slot_of.get(key as usize).copied())
                .filter(|&s| s < ranked.ranked.len())
                .map_or(ALLOCATED, |s| s as u8)
        })
        .collect();
    let nsites = ranked.ranked.len();
    // Running sums are wide: a hostile file's sizes cannot wrap them.
    let mut initial = vec![0i128; nsites];
    let mut initial_allocated = 0i128;
    let changes = Changes::of(
        replay,
        &slots,
        final_blocks,
        &mut initial,
        &mut initial_allocated,
    );

    let n = replay.len();
    let clamp = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
    let mut site_now: Vec<i128> = initial.clone();
    let mut alloc_now = initial_allocated;
    let sites_initial = sum_sizes(initial.iter().map(|&v| clamp(v)));
    let other_initial = replay.initial_requested.saturating_sub(sites_initial);

    // Series order: live, allocated, reserved, other, then the sites.
    let firsts: Vec<u64> = [
        replay.initial_requested,
        clamp(initial_allocated),
        replay.initial_reserved,
        other_initial,
    ]
    .into_iter()
    .chain(initial.iter().map(|&v| clamp(v)))
    .collect();
    let mut ext: Vec<Extremes> = firsts.iter().map(|&v| Extremes::new(v)).collect();
    let mut out: Vec<Vec<(u32, u64)>> = vec![Vec::new(); ext.len()];
    let per = n.div_ceil(max_buckets.max(1)).max(1);
    let mut buckets = 0u32;
    for i in 0..n {
        let ev = i as u32;
        let (a, b) = (changes.offsets[i] as usize, changes.offsets[i + 1] as usize);
        for &e in &changes.entries[a..b] {
            let (t, d) = ((e & 0xff) as u8, e >> 8);
            if t == ALLOCATED {
                alloc_now += i128::from(d);
            } else {
                site_now[t as usize] += i128::from(d);
            }
        }
        let sites_sum = sum_sizes(site_now.iter().map(|&v| clamp(v)));
        let values = |s: usize, site_now: &[i128]| -> u64 {
            match s {
                0 => replay.requested[i],
                1 => clamp(alloc_now),
                2 => replay.reserved[i],
                3 => replay.requested[i].saturating_sub(sites_sum),
                _ => clamp(site_now[s - 4]),
            }
        };
        if i % per == 0 {
            if i > 0 {
                for (x, o) in ext.iter_mut().zip(&mut out) {
                    x.flush(o);
                }
            }
            buckets += 1;
            for (s, x) in ext.iter_mut().enumerate() {
                x.start(ev, values(s, &site_now));
            }
        } else {
            // Live, reserved and other change with most events; the rest only where
            // this event changed them.
            for s in [0, 2, 3] {
                ext[s].see(ev, values(s, &site_now));
            }
            for &e in &changes.entries[a..b] {
                let t = (e & 0xff) as u8;
                let s = if t == ALLOCATED { 1 } else { 4 + t as usize };
                ext[s].see(ev, values(s, &site_now));
            }
        }
    }
    if n > 0 {
        for (x, o) in ext.iter_mut().zip(&mut out) {
            x.flush(o);
        }
    }
    let mut series = firsts
        .into_iter()
        .zip(out)
        .map(|(initial, points)| Series { initial, points });
    let mut next = || series.next().unwrap_or_default();
    let (live, allocated, reserved, other) = (next(), next(), next(), next());
    let sites = ranked
        .ranked
        .iter()
        .map(|&key| SiteCounter {
            site: attr.site(key).clone(),
            bytes_at_peak: ranked.at_peak[key as usize],
            series: next(),
        })
        .collect();
    Counters {
        live,
        allocated,
        reserved,
        sites,
        other,
        buckets,
    }
}
