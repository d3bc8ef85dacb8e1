//! Whether a family of windows is a unit of work, measured: a micro-batch or a step cleans
//! up after itself (most bytes it allocates it also frees) and repeats alike, in length
//! and in what it allocates; a layer does not clean up (its activations live until
//! backward), a function entered in forward and again in backward does not repeat the same
//! work, and a function called now and then does not repeat alike.

use serde::Serialize;

use crate::replay::{Origin, Replay};

/// The figures that decide whether windows are units of work.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Quality {
    /// Windows in the family.
    pub windows: u64,
    /// Median over the windows of the share of the bytes allocated in a window that are
    /// freed in the same window.
    pub self_freed: f64,
    /// The same share over all windows' bytes together.
    pub self_freed_bytes: f64,
    /// Share of the middle windows (all but the first and the last) whose event count is
    /// within 2x of their median.
    pub alike_windows: f64,
    /// Share of the middle windows' events that lie in those alike windows.
    pub alike_events: f64,
    /// Share of the middle windows that allocate from the same call stacks as most others
    /// (at least half of the stacks in common with a typical window).
    pub same_work: f64,
    /// Share of the trace's allocations from the first window's start on.
    pub coverage: f64,
    /// What fails, if anything (empty: the windows are units of work).
    pub failed: Vec<Failure>,
    /// Measured in full; `false`: refused by the cheap checks (count, coverage, length,
    /// alikeness, in that order, stopping at the first that fails), and the figures not
    /// measured are 0 (`self_freed`, `self_freed_bytes`, `same_work` always).
    pub measured: bool,
}

/// A check the windows fail.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
#[serde(tag = "check", rename_all = "kebab-case")]
pub enum Failure {
    /// Fewer than [`MIN_WINDOWS`] windows.
    TooFew {
        /// Windows there are.
        windows: u64,
    },
    /// Windows do not free most of what they allocate (layers: activations live on).
    NotCleaningUp {
        /// The median share freed in the window that allocated it.
        self_freed: f64,
    },
    /// Windows differ too much in length (a function called now and then).
    NotAlike {
        /// Share of middle windows within 2x of the median length.
        alike_windows: f64,
        /// Share of the middle windows' events in them.
        alike_events: f64,
    },
    /// The windows are the layers of one pass: the last is many times longer than the
    /// others and frees most of what they kept (the backward after the forward's layers).
    OnePass {
        /// The last window's events over the median middle window's.
        last_ratio: f64,
        /// Share of the bytes the other windows kept past themselves that the last frees.
        freed_by_last: f64,
    },
    /// The trace's stacks show a single backward, the family's middle windows all start
    /// inside it and free less than `LAYERS_KEEP_BELOW` in place: they are its layers
    /// (each layer's forward recomputed by activation checkpointing).
    OneBackward,
    /// Every allocation from the first window on runs inside one call of a module's
    /// `forward` or an optimizer's `step`, under which every window starts, and the
    /// windows free less than `LAYERS_KEEP_BELOW` in place: they are the layers of a
    /// single forward (keeping what they save for a backward the trace does not hold) or
    /// the parameters of a single step (each getting its state).
    OneCall,
    /// Windows do different work (a function entered both in forward and in backward).
    NotSameWork {
        /// Share of the middle windows doing a typical window's work.
        same_work: f64,
    },
    /// The typical window holds a handful of events: the family marks something done a
    /// few times in a row (set-up per module), not units of work.
    TooShort {
        /// Events of the median middle window.
        median_events: u64,
    },
    /// The first window starts late: too much of the trace is before any window.
    LowCoverage {
        /// Share of allocations from the first window on.
        coverage: f64,
    },
}

/// Windows enough to judge growth on: twice the run a late leak needs, so such a run can
/// be told from the first half of the trace.
pub const EVIDENCE: usize = 6;
/// Fewest windows that can show growth across units of work.
pub const MIN_WINDOWS: usize = 3;
/// A unit of work frees more than this share of what it allocates (median window).
pub const MIN_SELF_FREED: f64 = 0.5;
/// At least this share of the middle windows are within 2x of the median length...
pub const MIN_ALIKE_WINDOWS: f64 = 0.75;
/// ...and hold at least this share of the middle windows' events.
pub const MIN_ALIKE_EVENTS: f64 = 0.5;
/// A unit of work holds at least this many events (median middle window): an
/// allocation, its free and the work around them, more than once.
pub const MIN_WINDOW_EVENTS: u64 = 8;
/// The windows cover at least this share of the allocations.
pub const MIN_COVERAGE: f64 = 0.9;
/// At least this share of the middle windows do a typical window's work.
pub const MIN_SAME_WORK: f64 = 0.75;
/// Families whose lengths spread past the 2x rule are measured in full (after the others,
/// and only when none of those is a unit of work) when at least this share of their middle
/// windows is within it: requests of 4 to 96 tokens put a third of them there.
pub const MIN_ALIKE_WINDOWS_SPREAD: f64 = 0.25;
/// Windows whose lengths spread more than [`MIN_ALIKE_WINDOWS`] allows still repeat alike
/// when they do the same work ([`MIN_SAME_WORK`]) and at least this share of the long and
/// short ones among them do it too: requests of 4 to 96 tokens are one unit of work of
/// different lengths; a function called now and then, or a family with one window
/// holding a backward, is not.
pub const SPREAD_SAME_WORK: f64 = 0.9;
/// Windows inside the one backward of a trace are its layers (recomputed by activation
/// checkpointing, each leaving its gradients behind) when they free less than this median
/// share in place; whole passes repeated there free nearly everything they make.
pub const LAYERS_KEEP_BELOW: f64 = 0.9;
/// A family whose last window is this many times longer than its median middle window,
/// and whose windows' kept memory is mostly freed in that last window, is the layers of
/// one pass (the backward frees what each layer's forward kept), not units of work. A
/// run of micro-batches frees what each keeps in the next window, so its last window
/// frees about one window's share, however long it is.
pub const ONE_PASS_LAST_RATIO: u64 = 4;
/// Windows looked at as the typical one (evenly spaced); the one most others resemble wins.
const REFERENCES: usize = 8;
/// Lifetimes looked at to measure how windows clean up (evenly sampled beyond).
const SAMPLE: usize = 50_000;
/// Middle windows whose stacks are compared (evenly sampled beyond).
const SAMPLED_WINDOWS: usize = 256;

impl Quality {
    /// Whether the windows pass every check.
    pub fn qualifies(&self) -> bool {
        self.failed.is_empty()
    }
}

/// The allocations of a trace, as the checks read them: the event index of every `alloc`
/// (in order) and an even sample of the traced lifetimes (birth, free, bytes), in birth
/// order.
pub struct Allocations {
    births: Vec<u32>,
    /// The stack of each allocation in `births`.
    stacks: Vec<u32>,
    /// One more than the largest stack id.
    stack_bound: usize,
    sample: Vec<(u32, Option<u32>, u64)>,
}

impl Allocations {
    /// The traced allocations of `replay`.
    pub fn of(replay: &Replay) -> Allocations {
        let (births, stacks): (Vec<u32>, Vec<u32>) = replay
            .lifetimes
            .iter()
            .filter_map(|l| match l.origin {
                Origin::Traced(b) => Some((b, l.stack.0)),
                _ => None,
            })
            .unzip();
        let step = births.len().div_ceil(SAMPLE).max(1);
        let sample = replay
            .lifetimes
            .iter()
            .filter_map(|l| match l.origin {
                Origin::Traced(b) => Some((b, l.freed, l.bytes)),
                _ => None,
            })
            .step_by(step)
            .collect();
        let stack_bound = stacks.iter().max().map_or(0, |&m| m as usize + 1);
        Allocations {
            births,
            stacks,
            stack_bound,
            sample,
        }
    }

    /// Event indices of the allocations, in order.
    pub fn births(&self) -> &[u32] {
        &self.births
    }

    /// The stack id of allocation `i` (of [`Allocations::births`]).
    pub fn stack(&self, i: usize) -> u32 {
        self.stacks[i]
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The event counts of the middle windows (all but the first and the last; every window
/// when there are two or fewer).
fn middle_lengths(starts: &[u32], events: u32) -> Vec<u64> {
    let n = starts.len();
    let middle = if n > 2 { 1..n - 1 } else { 0..n };
    middle
        .map(|k| {
            starts
                .get(k + 1)
                .copied()
                .unwrap_or(events)
                .saturating_sub(starts[k]) as u64
        })
        .collect()
}

/// How alike the middle windows are: the share of them within 2x of their median length,
/// and the share of their events those hold.
fn alike(starts: &[u32], events: u32) -> (f64, f64) {
    let mut lens = middle_lengths(starts, events);
    // What follows only counts and sums, so the order selecting leaves does not matter.
    let med = upper_median(&mut lens);
    let (mut n_ok, mut ev_ok, mut ev_all) = (0usize, 0u64, 0u64);
    for &l in &lens {
        ev_all += l;
        if l * 2 >= med && l <= med * 2 {
            n_ok += 1;
            ev_ok += l;
        }
    }
    (
        n_ok as f64 / lens.len().max(1) as f64,
        ev_ok as f64 / ev_all.max(1) as f64,
    )
}

/// How the windows starting at `starts` clean up: the median share of a window's allocated
/// bytes it frees itself, and the same over all bytes.
fn self_freed(starts: &[u32], allocs: &Allocations) -> (f64, f64) {
    let n = starts.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mut allocated = vec![0u128; n];
    let mut freed = vec![0u128; n];
    // The sample is in birth order, so its windows are found walking forward with it
    // rather than searched for each allocation; a free is in the same window when it
    // comes before the next window's start.
    let mut w = 0;
    for &(b, f, bytes) in &allocs.sample {
        if b < starts[0] {
            continue;
        }
        while w + 1 < n && starts[w + 1] <= b {
            w += 1;
        }
        let end = starts.get(w + 1).copied().unwrap_or(u32::MAX);
        allocated[w] += bytes as u128;
        if f.is_some_and(|f| starts[w] <= f && f < end) {
            freed[w] += bytes as u128;
        }
    }
    let shares: Vec<f64> = (0..n)
        .filter(|&w| allocated[w] > 0)
        .map(|w| freed[w] as f64 / allocated[w] as f64)
        .collect();
    let total: u128 = allocated.iter().sum();
    let total_freed: u128 = freed.iter().sum();
    (
        median(shares),
        if total == 0 {
            0.0
        } else {
            total_freed as f64 / total as f64
        },
    )
}

/// Shared share of two sorted sets: |a ∩ b| / |a ∪ b|.
fn jaccard(a: &[u32], b: &[u32]) -> f64 {
    let (mut i, mut j, mut both) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                both += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - both;
    if union == 0 {
        1.0
    } else {
        both as f64 / union as f64
    }
}

/// How many middle windows do the same work as a typical one: each window's set of
/// allocation stacks against a few evenly spaced windows' sets, the share that has at
/// least half its stacks in common with the one most of them resemble. Past
/// [`SAMPLED_WINDOWS`] middle windows, an even sample of them stands for all.
fn same_work(starts: &[u32], events: u32, allocs: &Allocations) -> (f64, Vec<(usize, bool)>) {
    let n = starts.len();
    let middle: Vec<usize> = if n > 2 {
        (1..n - 1).collect()
    } else {
        (0..n).collect()
    };
    if middle.is_empty() {
        return (0.0, Vec::new());
    }
    let step = middle.len().div_ceil(SAMPLED_WINDOWS).max(1);
    let sampled: Vec<usize> = middle.into_iter().step_by(step).collect();
    // A window's allocations are a contiguous run of `births`; its distinct stacks are
    // found with a stamp per stack rather than by sorting the run.
    let mut stamp: Vec<u32> = vec![0; allocs.stack_bound];
    let sets: Vec<Vec<u32>> = sampled
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let end = starts.get(w + 1).copied().unwrap_or(events);
            let lo = allocs.births.partition_point(|&b| b < starts[w]);
            let hi = allocs.births.partition_point(|&b| b < end);
            let mark = i as u32 + 1;
            let mut set: Vec<u32> = allocs.stacks[lo..hi]
                .iter()
                .copied()
                .filter(|&st| std::mem::replace(&mut stamp[st as usize], mark) != mark)
                .collect();
            set.sort_unstable();
            set
        })
        .collect();
    let step = sets.len().div_ceil(REFERENCES).max(1);
    let best = (0..sets.len())
        .step_by(step)
        .max_by_key(|&r| sets.iter().filter(|w| jaccard(w, &sets[r]) >= 0.5).count())
        .unwrap_or(0);
    let flags: Vec<(usize, bool)> = sampled
        .iter()
        .zip(&sets)
        .map(|(&w, set)| (w, jaccard(set, &sets[best]) >= 0.5))
        .collect();
    let alike = flags.iter().filter(|f| f.1).count();
    (alike as f64 / sets.len() as f64, flags)
}

/// Whether the middle windows whose length is not within 2x of the median (of those
/// `same_work` sampled) do a typical window's work, nearly all ([`SPREAD_SAME_WORK`] of
/// them): then their lengths differ by how much work, not by what work.
fn spread_is_more_of_the_same(starts: &[u32], events: u32, flags: &[(usize, bool)]) -> bool {
    let mut lens = middle_lengths(starts, events);
    let med = upper_median(&mut lens);
    let len = |w: usize| {
        starts
            .get(w + 1)
            .copied()
            .unwrap_or(events)
            .saturating_sub(starts[w]) as u64
    };
    let unlike: Vec<bool> = flags
        .iter()
        .filter(|&&(w, _)| {
            let l = len(w);
            !(l * 2 >= med && l <= med * 2)
        })
        .map(|f| f.1)
        .collect();
    let same = unlike.iter().filter(|&&b| b).count();
    same as f64 >= SPREAD_SAME_WORK * unlike.len() as f64
}

/// Events of the median middle window (all but the first and the last).
fn median_events(starts: &[u32], events: u32) -> u64 {
    upper_median(&mut middle_lengths(starts, events))
}

/// The upper median of `lens` (0 when empty), selected in place: linear where sorting is
/// not (families of call sites can have a window per allocation).
fn upper_median(lens: &mut [u64]) -> u64 {
    if lens.is_empty() {
        return 0;
    }
    let half = lens.len() / 2;
    *lens.select_nth_unstable(half).1
}

/// Measures windows starting at `starts` (increasing) over a trace of `events` events.
pub fn measure(starts: &[u32], events: u32, allocs: &Allocations) -> Quality {
    let (alike_windows, alike_events) = alike(starts, events);
    let (same_work, flags) = same_work(starts, events, allocs);
    let births = allocs.births();
    let coverage = match starts.first() {
        Some(&s) if !births.is_empty() => {
            (births.len() - births.partition_point(|&b| b < s)) as f64 / births.len() as f64
        }
        _ => 0.0,
    };
    let (self_freed, self_freed_bytes) = self_freed(starts, allocs);
    let mut failed = Vec::new();
    if starts.len() < MIN_WINDOWS {
        failed.push(Failure::TooFew {
            windows: starts.len() as u64,
        });
    }
    if self_freed <= MIN_SELF_FREED {
        failed.push(Failure::NotCleaningUp { self_freed });
    }
    let spread_but_same_work =
        same_work >= MIN_SAME_WORK && spread_is_more_of_the_same(starts, events, &flags);
    if (alike_windows < MIN_ALIKE_WINDOWS || alike_events < MIN_ALIKE_EVENTS)
        && !spread_but_same_work
    {
        failed.push(Failure::NotAlike {
            alike_windows,
            alike_events,
        });
    }
    let median = median_events(starts, events);
    if let Some((last_ratio, freed_by_last)) = one_pass(starts, events, median, allocs) {
        failed.push(Failure::OnePass {
            last_ratio,
            freed_by_last,
        });
    }
    if starts.len() >= MIN_WINDOWS && median < MIN_WINDOW_EVENTS {
        failed.push(Failure::TooShort {
            median_events: median,
        });
    }
    if same_work < MIN_SAME_WORK {
        failed.push(Failure::NotSameWork { same_work });
    }
    if coverage < MIN_COVERAGE {
        failed.push(Failure::LowCoverage { coverage });
    }
    Quality {
        windows: starts.len() as u64,
        self_freed,
        self_freed_bytes,
        alike_windows,
        alike_events,
        same_work,
        coverage,
        failed,
        measured: true,
    }
}

/// What the cheap checks say of a family.
pub enum Cheap {
    /// Worth measuring in full.
    Passes,
    /// Lengths spread past the 2x rule, with at least [`MIN_ALIKE_WINDOWS_SPREAD`] of the
    /// windows within it: worth measuring when no family passes, since unequal lengths
    /// pass when the work is the same.
    Spread,
    /// Refused, with the figures that were measured and what they fail.
    Refused(Quality),
}

/// The cheap checks (count, coverage, alikeness, length), to pass over candidates before
/// their allocations are looked at.
pub fn cheap(starts: &[u32], events: u32, allocs: &Allocations) -> Cheap {
    let refused = |failed: Vec<Failure>, coverage: f64, alike: (f64, f64)| {
        Cheap::Refused(Quality {
            windows: starts.len() as u64,
            self_freed: 0.0,
            self_freed_bytes: 0.0,
            alike_windows: alike.0,
            alike_events: alike.1,
            same_work: 0.0,
            coverage,
            failed,
            measured: false,
        })
    };
    // The cheapest first, and a family refused by one is not measured further (its other
    // figures stay 0): a binary search, then passes over the windows.
    if starts.len() < MIN_WINDOWS {
        let windows = starts.len() as u64;
        return refused(vec![Failure::TooFew { windows }], 0.0, (0.0, 0.0));
    }
    let births = allocs.births();
    let covered = births.len() - births.partition_point(|&b| b < starts[0]);
    let coverage = covered as f64 / births.len().max(1) as f64;
    if coverage < MIN_COVERAGE {
        return refused(
            vec![Failure::LowCoverage { coverage }],
            coverage,
            (0.0, 0.0),
        );
    }
    let (alike_windows, alike_events) = alike(starts, events);
    let median_events = median_events(starts, events);
    if median_events < MIN_WINDOW_EVENTS {
        let failed = vec![Failure::TooShort { median_events }];
        return refused(failed, coverage, (alike_windows, alike_events));
    }
    if alike_windows >= MIN_ALIKE_WINDOWS && alike_events >= MIN_ALIKE_EVENTS {
        Cheap::Passes
    } else if alike_windows >= MIN_ALIKE_WINDOWS_SPREAD {
        Cheap::Spread
    } else {
        let failed = vec![Failure::NotAlike {
            alike_windows,
            alike_events,
        }];
        refused(failed, coverage, (alike_windows, alike_events))
    }
}

/// Whether the windows are the layers of one pass ([`ONE_PASS_LAST_RATIO`]): the last
/// window's length over the median middle window's, and the share of the bytes the other
/// windows kept past their own end that are freed inside the last window (more than half).
fn one_pass(starts: &[u32], events: u32, median: u64, allocs: &Allocations) -> Option<(f64, f64)> {
    let n = starts.len();
    if n < MIN_WINDOWS || median == 0 {
        return None;
    }
    let last = starts[n - 1];
    let last_len = u64::from(events.saturating_sub(last));
    if last_len < median.saturating_mul(ONE_PASS_LAST_RATIO) {
        return None;
    }
    let (mut kept, mut by_last) = (0u128, 0u128);
    let mut w = 0;
    for &(b, f, bytes) in &allocs.sample {
        if b < starts[0] || b >= last {
            continue;
        }
        while w + 1 < n && starts[w + 1] <= b {
            w += 1;
        }
        let end = starts[w + 1];
        if f.is_none_or(|f| f >= end) {
            kept += u128::from(bytes);
            if f.is_some_and(|f| f >= last) {
                by_last += u128::from(bytes);
            }
        }
    }
    let share = if kept == 0 {
        0.0
    } else {
        by_last as f64 / kept as f64
    };
    (share > 0.5).then_some((last_len as f64 / median as f64, share))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocs(life: &[(u32, Option<u32>, u64)]) -> Allocations {
        Allocations {
            births: life.iter().map(|l| l.0).collect(),
            stacks: vec![1; life.len()],
            stack_bound: 2,
            sample: life.to_vec(),
        }
    }

    /// Three windows of 10 events, each allocating 100 bytes it frees and 10 it keeps:
    /// 100/110 freed in place; a family of layers keeping everything fails.
    #[test]
    fn units_of_work_clean_up_layers_do_not() {
        let mut life = Vec::new();
        for w in 0..3u32 {
            life.push((w * 10, Some(w * 10 + 5), 100));
            life.push((w * 10 + 1, None, 10));
        }
        let q = measure(&[0, 10, 20], 30, &allocs(&life));
        assert!((q.self_freed - 100.0 / 110.0).abs() < 1e-9, "{q:?}");
        assert!(q.qualifies(), "{q:?}");
        let kept: Vec<_> = life.iter().map(|&(b, _, n)| (b, None, n)).collect();
        let q = measure(&[0, 10, 20], 30, &allocs(&kept));
        assert_eq!(q.failed, vec![Failure::NotCleaningUp { self_freed: 0.0 }]);
    }

    /// Windows of lengths 10, 10, 100, 10, 10 (middle: 10, 100, 10; median 10): two of
    /// three alike, holding 20 of 120 events.
    #[test]
    fn alikeness_counts_windows_and_events() {
        let (w, e) = alike(&[0, 10, 20, 120, 130], 140);
        assert!((w - 2.0 / 3.0).abs() < 1e-9);
        assert!((e - 20.0 / 120.0).abs() < 1e-9);
    }

    #[test]
    fn coverage_is_the_share_of_allocations_from_the_first_start() {
        let life: Vec<_> = (0..10u32).map(|i| (i, Some(i), 1)).collect();
        let q = measure(&[5, 6, 7], 10, &allocs(&life));
        assert!((q.coverage - 0.5).abs() < 1e-9);
        assert!(q.failed.contains(&Failure::LowCoverage { coverage: 0.5 }));
    }
}
