//! `leakscope leaks`: the call sites whose memory grows per window (micro-batch), with
//! the rate, how many windows grew, what is still held, and what (if anything) frees it.
//!
//! Growth is measured by survivors, not by live bytes at window ends (which temporaries
//! in flight across a boundary make noisy): an allocation born in window *w* survives when
//! it is still alive at the end of window *w + 1* (at the end of the trace for the last
//! windows). A site's rate is the median of its per-window survivor bytes over the windows
//! where it grew: the typical increment, not a total divided by a count.

use serde::Serialize;

use super::top::{SiteInfo, site_info};
use crate::attribute::Attributor;
use crate::replay::{Origin, Replay};
use crate::windows::Windows;

/// JSON schema name of [`LeakReport`].
pub const SCHEMA: &str = "leakscope.leaks/1";

/// Options of the leak finder.
#[derive(Clone, Debug, Default)]
pub struct LeakOptions {
    /// Windows at the start whose growth is warm-up, whatever it looks like.
    pub warmup: usize,
    /// Sites growing by fewer bytes per window are not listed.
    pub min_bytes: u64,
}

/// Where retained memory is released.
#[derive(Clone, Debug, Serialize)]
pub struct Release {
    /// The first `free_completed` of a survivor.
    pub event_index: u32,
    /// The site of that free's stack, when it has frames.
    pub site: Option<String>,
    /// In how many different windows survivors were released.
    pub release_windows: u64,
}

/// One growing site.
#[derive(Clone, Debug, Serialize)]
pub struct Growth {
    /// The grouping key (by default `file:line:function` of the allocating site).
    pub key: String,
    /// The site's frame, when it has one.
    pub site: Option<SiteInfo>,
    /// `leak`, `retained`, `warmup`, `bounded`, `sporadic` or `in-flight` (memory of
    /// micro-batches in flight in a pipeline schedule: each kept for the same few windows).
    pub kind: &'static str,
    /// Typical survivor bytes per growing window (median).
    pub bytes_per_window: u64,
    /// Windows in which the site grew.
    pub windows_growing: u64,
    /// Windows in all.
    pub windows_total: u64,
    /// The most survivor bytes of this site alive at once (at a window end or the end).
    pub retained_bytes: u64,
    /// Survivor bytes still alive at the end of the trace.
    pub bytes_at_end: u64,
    /// Surviving allocations.
    pub blocks: u64,
    /// First and last window that grew.
    pub first_window: u64,
    /// Last window that grew.
    pub last_window: u64,
    /// Where the memory was released (retained sites).
    pub released_at: Option<Release>,
    /// The retained group the site belongs to (suspects only).
    pub group: Option<u64>,
    /// Some survivor addresses.
    pub example_addresses: Vec<String>,
    /// The full stack of one survivor, innermost first, as `file:line:function`.
    pub stack: Vec<String>,
    /// Survivor bytes born in each window (0 where the site did not grow): the series
    /// `bytes_per_window` is the median of, over its nonzero entries.
    pub survivors_per_window: Vec<u64>,
}

/// Sites whose survivors are born in the same windows and freed together.
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    /// Group id (as in [`Growth::group`]).
    pub id: u64,
    /// The member allocated first in each window: the likely root of what is kept.
    pub root: String,
    /// Every member's key.
    pub members: Vec<String>,
    /// Σ bytes per window of the members.
    pub bytes_per_window: u64,
}

/// The windows used.
#[derive(Clone, Debug, Serialize)]
pub struct WindowInfo {
    /// Where they came from.
    pub source: String,
    /// What was matched.
    pub detail: String,
    /// Why.
    pub reason: String,
    /// Guessed from a repeating function (they may be layers, not steps).
    pub guessed: bool,
    /// How many.
    pub count: u64,
}

/// Trace facts that bear on the result.
#[derive(Clone, Debug, Serialize)]
pub struct TraceFacts {
    /// The trace misses its beginning (ring buffer wrapped or late start).
    pub wrapped: bool,
    /// Events in the trace.
    pub events: u64,
}

/// The `leaks` report (`leakscope.leaks/1`).
#[derive(Clone, Debug, Serialize)]
pub struct LeakReport {
    /// Schema name.
    pub schema: &'static str,
    /// Device.
    pub device: i64,
    /// Grouping key.
    pub by: &'static str,
    /// Windows.
    pub windows: WindowInfo,
    /// Trace facts.
    pub trace: TraceFacts,
    /// Leaks and retained growth, largest rate first.
    pub suspects: Vec<Growth>,
    /// Warm-up, bounded and sporadic growth (not suspects).
    pub warmup: Vec<Growth>,
    /// Retained groups among the suspects.
    pub groups: Vec<Group>,
}

fn median(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// Finds the sites that grow per window.
pub fn leaks(
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
    opts: &LeakOptions,
) -> LeakReport {
    let snap = attr.snapshot();
    let n = windows.len();
    let events = windows.events;
    // Per key: survivor bytes per window, and the survivors' lifetime indices.
    let mut per_key: Vec<(Vec<u64>, Vec<usize>)> = Vec::new();
    for (li, l) in replay.lifetimes.iter().enumerate() {
        let Origin::Traced(born) = l.origin else {
            continue;
        };
        let Some(w) = windows.of_event(born) else {
            continue;
        };
        let horizon = if w + 1 < n {
            windows.range(w + 1).1
        } else {
            events
        };
        let survives = match l.freed {
            None => true,
            Some(f) => f >= horizon && horizon < events,
        };
        if !survives {
            continue;
        }
        let Some(k) = attr.key(l.stack) else { continue };
        let k = k as usize;
        if per_key.len() <= k {
            per_key.resize_with(k + 1, || (vec![0; n], Vec::new()));
        }
        per_key[k].0[w] += l.bytes;
        per_key[k].1.push(li);
    }

    let mut suspects = Vec::new();
    let mut others = Vec::new();
    let n_eff = n.saturating_sub(opts.warmup);
    for (k, (series, lifes)) in per_key.into_iter().enumerate() {
        if lifes.is_empty() {
            continue;
        }
        let grew: Vec<usize> = (0..n).filter(|&w| series[w] > 0).collect();
        let counted: Vec<usize> = grew.iter().copied().filter(|&w| w >= opts.warmup).collect();
        let bytes_per_window = median(grew.iter().map(|&w| series[w]).collect());
        if bytes_per_window < opts.min_bytes {
            continue;
        }
        let total: u64 = lifes.iter().map(|&i| replay.lifetimes[i].bytes).sum();
        let at_end: u64 = lifes
            .iter()
            .filter(|&&i| replay.lifetimes[i].freed.is_none())
            .map(|&i| replay.lifetimes[i].bytes)
            .sum();
        let most = counted.len() >= 2 && counted.len() * 2 >= n_eff;
        // How many window boundaries each released survivor outlived. Memory kept until a
        // coarser boundary outlives a varying number (the sawtooth: the first micro-batch's
        // buffer waits longest); micro-batches merely in flight in a pipeline schedule all
        // outlive the same few. The latter is not growth.
        let spans: Vec<usize> = lifes
            .iter()
            .filter_map(|&i| {
                let l = &replay.lifetimes[i];
                let Origin::Traced(b) = l.origin else {
                    return None;
                };
                Some(windows.of_event(l.freed?)? - windows.of_event(b)?)
            })
            .collect();
        let steady_in_flight = at_end * 10 < total * 9
            && !spans.is_empty()
            && spans.iter().max().unwrap_or(&0) - spans.iter().min().unwrap_or(&0) <= 1;
        let kind = if most && steady_in_flight {
            "in-flight"
        } else if most {
            if at_end * 10 >= total * 9 {
                "leak"
            } else {
                "retained"
            }
        } else if counted.is_empty() || grew.len() == 1 {
            "warmup"
        } else if *grew.last().unwrap_or(&0) * 2 < n {
            "bounded"
        } else {
            "sporadic"
        };
        // Survivor bytes alive at each window end and at the end: the most held at once.
        let mut deltas: Vec<(u32, i128)> = Vec::with_capacity(lifes.len() * 2);
        for &i in &lifes {
            let l = &replay.lifetimes[i];
            if let Origin::Traced(b) = l.origin {
                deltas.push((b, l.bytes as i128));
            }
            if let Some(f) = l.freed {
                deltas.push((f, -(l.bytes as i128)));
            }
        }
        deltas.sort_unstable();
        let mut retained = 0i128;
        let mut cur = 0i128;
        let mut di = 0;
        let ends = (0..n)
            .map(|w| windows.range(w).1)
            .chain(std::iter::once(events));
        for e in ends {
            while di < deltas.len() && deltas[di].0 < e {
                cur += deltas[di].1;
                di += 1;
            }
            retained = retained.max(cur);
        }
        let released_at = if kind == "retained" {
            let freed: Vec<&crate::replay::Lifetime> = lifes
                .iter()
                .map(|&i| &replay.lifetimes[i])
                .filter(|l| l.freed.is_some())
                .collect();
            freed.iter().min_by_key(|l| l.freed).map(|first| {
                let mut wins: Vec<usize> = freed
                    .iter()
                    .filter_map(|l| windows.of_event(l.freed.unwrap_or(0)))
                    .collect();
                wins.sort_unstable();
                wins.dedup();
                // The release is a burst (everything kept since the last boundary goes at
                // once): report its first free of this site's memory that outlived a
                // boundary, survivor or not.
                let first_free = first.freed.unwrap_or(0);
                let burst = windows.of_event(first_free);
                let burst_start = replay
                    .lifetimes
                    .iter()
                    .filter(|l| attr.key(l.stack) == Some(k as u32))
                    .filter_map(|l| match l.origin {
                        Origin::Traced(b) => Some((b, l.freed?)),
                        _ => None,
                    })
                    .filter(|&(b, f)| {
                        f <= first_free
                            && windows.of_event(f) == burst
                            && windows.of_event(b) < burst
                    })
                    .map(|(_, f)| f)
                    .min()
                    .unwrap_or(first_free);
                Release {
                    event_index: burst_start,
                    site: first
                        .free_stack
                        .filter(|s| !snap.stacks.get(*s).is_empty())
                        .and_then(|s| attr.key(s))
                        .map(|kk| attr.key_info(kk).label.clone()),
                    release_windows: wins.len() as u64,
                }
            })
        } else {
            None
        };
        let key = attr.key_info(k as u32).clone();
        let first_life = &replay.lifetimes[lifes[0]];
        let g = Growth {
            key: key.label.clone(),
            site: key.frame.map(|f| site_info(snap, f)),
            kind,
            bytes_per_window,
            windows_growing: grew.len() as u64,
            windows_total: n as u64,
            retained_bytes: retained.max(0) as u64,
            bytes_at_end: at_end,
            blocks: lifes.len() as u64,
            first_window: grew.first().copied().unwrap_or(0) as u64,
            last_window: grew.last().copied().unwrap_or(0) as u64,
            released_at,
            group: None,
            example_addresses: lifes
                .iter()
                .take(3)
                .map(|&i| format!("0x{:x}", replay.lifetimes[i].addr))
                .collect(),
            stack: snap
                .stacks
                .get(first_life.stack)
                .iter()
                .map(|&f| super::top::label(snap, f))
                .collect(),
            survivors_per_window: series,
        };
        if kind == "leak" || kind == "retained" {
            suspects.push((g, grew, lifes, k as u32));
        } else {
            others.push(g);
        }
    }
    suspects.sort_by(|a, b| {
        b.0.bytes_per_window
            .cmp(&a.0.bytes_per_window)
            .then(a.0.key.cmp(&b.0.key))
    });
    others.sort_by(|a, b| {
        b.retained_bytes
            .cmp(&a.retained_bytes)
            .then(a.key.cmp(&b.key))
    });

    // Retained groups: sites of the same kind whose survivors are released in the same
    // windows (or never), i.e. freed together. Growth windows may differ by one or two at
    // the edges of a schedule, so they do not split a group.
    let mut groups: Vec<Group> = Vec::new();
    let mut sigs: Vec<(&'static str, Vec<usize>)> = Vec::new();
    // Per group, per member: the first survivor birth in each window.
    let mut births: Vec<Vec<(String, u32)>> = Vec::new();
    for (g, _, lifes, kid) in suspects.iter_mut() {
        let mut rel: Vec<usize> = lifes
            .iter()
            .filter_map(|&i| replay.lifetimes[i].freed)
            .filter_map(|f| windows.of_event(f))
            .collect();
        rel.sort_unstable();
        rel.dedup();
        let sig = (g.kind, rel);
        let gi = match sigs.iter().position(|s| *s == sig) {
            Some(i) => i,
            None => {
                sigs.push(sig);
                births.push(Vec::new());
                groups.push(Group {
                    id: groups.len() as u64,
                    root: String::new(),
                    members: Vec::new(),
                    bytes_per_window: 0,
                });
                groups.len() - 1
            }
        };
        g.group = Some(gi as u64);
        groups[gi].members.push(g.key.clone());
        groups[gi].bytes_per_window += g.bytes_per_window;
        births[gi].push((g.key.clone(), *kid));
    }
    // The likely root: the member whose kept memory was allocated first (what is kept is
    // allocated before what it keeps alive). Allocations kept across a boundary count
    // even when born before the first window (a pipeline receives its first input then).
    let mut first_kept: crate::model::fxhash::FastMap<u32, u32> = Default::default();
    if !groups.is_empty() {
        for l in &replay.lifetimes {
            let Origin::Traced(b) = l.origin else {
                continue;
            };
            let crossed = l
                .freed
                .is_none_or(|f| windows.of_event(f) != windows.of_event(b));
            if crossed && let Some(k) = attr.key(l.stack) {
                let e = first_kept.entry(k).or_insert(b);
                *e = (*e).min(b);
            }
        }
    }
    for (gi, members) in births.iter().enumerate() {
        let root = members.iter().min_by_key(|(key, kid)| {
            (
                first_kept.get(kid).copied().unwrap_or(u32::MAX),
                key.clone(),
            )
        });
        if let Some((key, _)) = root {
            groups[gi].root = key.clone();
        }
    }
    LeakReport {
        schema: SCHEMA,
        device: replay.device,
        by: attr.by().name(),
        windows: WindowInfo {
            source: windows.source.clone(),
            detail: windows.detail.clone(),
            reason: windows.reason.clone(),
            guessed: windows.guessed,
            count: n as u64,
        },
        trace: TraceFacts {
            wrapped: replay.pre_trace_blocks > 0 || replay.unmatched_frees > 0,
            events: events as u64,
        },
        suspects: suspects.into_iter().map(|s| s.0).collect(),
        warmup: others,
        groups,
    }
}
