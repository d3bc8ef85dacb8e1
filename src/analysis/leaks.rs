//! `leakscope leaks`: the call sites whose memory grows per window (micro-batch), with
//! the rate, how many windows grew, since when, what is still held, and what (if
//! anything) frees it.
//!
//! Growth is measured by survivors, not by live bytes at window ends (which temporaries
//! in flight across a boundary make noisy): an allocation born in window *w* survives when
//! it is still alive at the end of window *w + 1* (at the end of the trace for the last
//! windows). A site's rate is the median of its per-window survivor bytes over the windows
//! where it grew: the typical increment, not a total divided by a count.
//!
//! A site is a suspect when its survivors grow in most windows, or when they grow in
//! every window of a run of at least three that reaches the end of the trace and are never
//! freed (a leak that starts late: after a validation pass, a checkpoint, a cache switched
//! on), or when what they grow by is kept to the end whatever the rhythm (once per step
//! under micro-batch windows, once per evaluation: [`KEPT_LEAK_MIN_WINDOWS`]). Memory that
//! micro-batches merely hold while in flight is told apart by how many window boundaries
//! it outlives: always the same few.

use serde::Serialize;

use super::point::{At, Point, point_after};
use super::top::{self, RoleBytes, TopRow};
use crate::attribute::roles::RoleMap;
use crate::attribute::{Attributor, Site};
use crate::model::StackId;
use crate::model::fxhash::{FastMap, FastSet};
use crate::model::size::sum_sizes;
use crate::replay::{Lifetime, Origin, Replay};
use crate::windows::{Candidate, Quality, WindowCursor, WindowSource, Windows};

/// Options of the leak finder.
///
/// ```
/// let mut o = leakscope::analysis::LeakOptions::default();
/// o.warmup = 2;
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct LeakOptions {
    /// Windows at the start whose growth is warm-up, whatever it looks like.
    pub warmup: usize,
    /// Sites growing by fewer bytes per window are not listed.
    pub min_bytes: u64,
}

/// A leak whatever its rhythm: survivors in at least this many counted windows, nine
/// tenths of their bytes kept to the end, the last growth in the second half of the
/// trace. One occurrence is warm-up, two may be a cache filling; three that are never
/// given back, still happening late, are memory lost per occurrence.
pub const KEPT_LEAK_MIN_WINDOWS: usize = 3;

/// Growth in most windows that then stops for as many windows as it grew in (and three at
/// least) has stopped: a cache that filled up (bounded), not memory kept per window.
pub const STOPPED_MIN_WINDOWS: usize = 3;

/// Memory held to a coarser boundary (a sawtooth: kept per micro-batch until its
/// mini-batch ends) is let go in bursts, each freeing memory born in several earlier
/// windows; memory merely in flight (a pipeline's micro-batches, a buffer made for the
/// next window) is let go about a window at a time. A site's memory is released in bursts
/// when what it carried past the end of a window is freed in bursts in at least this many
/// windows...
pub const BURST_MIN_RELEASES: usize = 2;

/// ...and at least this share (numerator, denominator) of the carried bytes it freed went
/// in such bursts: windows freeing memory born in two earlier windows or more (or in one
/// and the window itself, where neither window beside it does the same: a mini-batch of
/// two, not a conveyor that frees what the window before handed it with its own scratch
/// in every window), that keep nothing of their own past the next window (a conveyor
/// hands each window's memory on to a later one; a boundary's release clears it, the
/// last window's own included), and that free it together, no backward running between
/// the frees (a mini-batch's kept outputs dropped at its end; a pipeline stage's
/// cool-down hands back each micro-batch's input after its own backward, however many
/// windows the inputs were born in). Memory handed to the next window only (a buffer for
/// it, a temporary its forward frees) is in flight and counts neither way, unless a burst
/// frees it. Such a site is judged on what it carries past each window's own end (not the
/// next window's) and frees in bursts: a mini-batch of three micro-batches keeps only its
/// first one past the next window, yet every one until the mini-batch ends.
pub const BURST_SHARE: (usize, usize) = (2, 3);

/// What a site's growth is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Kept in most windows, or in every window since some point, and never freed.
    Leak,
    /// Kept in most windows and released later (a sawtooth: freed at a coarser boundary).
    Retained,
    /// Grew once, or only in the warm-up windows.
    Warmup,
    /// Grew in a few early windows, then stopped (a cache that filled up).
    Bounded,
    /// Grew now and then.
    Sporadic,
    /// Memory of micro-batches in flight in a pipeline schedule: each kept for the same
    /// few windows.
    InFlight,
    /// Grew only in the last window: too late to judge (warm-up happens at the start).
    Late,
    /// Kept past its window by a reference cycle and freed by the garbage collector
    /// ([`super::gc_held`]): a sawtooth, not a leak.
    GcHeld,
}

impl Kind {
    /// The name as JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Leak => "leak",
            Kind::Retained => "retained",
            Kind::Warmup => "warmup",
            Kind::Bounded => "bounded",
            Kind::Sporadic => "sporadic",
            Kind::InFlight => "in-flight",
            Kind::Late => "late",
            Kind::GcHeld => "gc-held",
        }
    }

    /// Leaks and retained growth: what the report calls suspects.
    pub fn is_suspect(self) -> bool {
        matches!(self, Kind::Leak | Kind::Retained)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where retained memory is released.
#[derive(Clone, Debug, Serialize)]
pub struct Release {
    /// The first `free_completed` of the release burst.
    pub event_index: u32,
    /// The site of the freeing stack, when it has frames.
    pub site: Option<Site>,
    /// In how many different windows survivors were released.
    pub release_windows: u64,
}

/// One growing site.
#[derive(Clone, Debug, Serialize)]
pub struct Growth {
    /// Where the memory is allocated.
    pub site: Site,
    /// The role of most of its survivor bytes.
    pub role: String,
    /// Its survivor bytes by role, largest first.
    pub roles: Vec<RoleBytes>,
    /// The names its survivors were given, per kind (annotation, metadata, compile): those
    /// of most of their named bytes; absent when the snapshot carries none.
    #[serde(skip_serializing_if = "crate::attribute::names::Names::is_empty")]
    pub names: crate::attribute::names::Names,
    /// What the growth is.
    pub kind: Kind,
    /// Survivor bytes per window: the typical occurrence spread over its period (equal
    /// to `bytes_per_occurrence` when the site grows every window).
    pub bytes_per_window: u64,
    /// Typical survivor bytes per growing window (median over the windows the kind rests
    /// on).
    pub bytes_per_occurrence: u64,
    /// Windows between two growths (median), when the site grows every few windows
    /// rather than every one (`None`: every window, or once).
    pub period_windows: Option<u64>,
    /// Windows in which the site grew.
    pub windows_growing: u64,
    /// Windows in all.
    pub windows_total: u64,
    /// The window from which the growth the kind rests on runs (0-based): the first
    /// counted window that grew, or the first window of a late leak's run.
    pub onset_window: u64,
    /// The most bytes of this site's growing allocations alive at once (at a window end
    /// or the end), those made before the first window included.
    pub retained_bytes: u64,
    /// Bytes of its growing allocations still alive at the end of the trace.
    pub bytes_at_end: u64,
    /// Its growing allocations (survivors, and those kept from before the first window).
    pub blocks: u64,
    /// First window that grew.
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
    /// The file that first showed the growth, for a series of snapshots (`None` for the
    /// windows of a trace).
    pub onset_name: Option<String>,
}

/// Sites whose survivors are born in the same windows and freed together.
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    /// Group id (as in [`Growth::group`]).
    pub id: u64,
    /// The member allocated first in each window: the likely root of what is kept.
    pub root: Site,
    /// Every member.
    pub members: Vec<Site>,
    /// Σ bytes per window of the members.
    pub bytes_per_window: u64,
    /// The roles of the members' survivor bytes, largest first (activations with
    /// gradients: a retained autograd graph).
    pub roles: Vec<RoleBytes>,
}

/// The windows used.
#[derive(Clone, Debug, Serialize)]
pub struct WindowInfo {
    /// Where they came from.
    pub source: WindowSource,
    /// What was matched.
    pub detail: String,
    /// Why these (for `auto`: the figures that made them win).
    pub reason: String,
    /// The `--windows` value that gives them again (none for the whole trace).
    pub spec: Option<String>,
    /// Found by `auto` from functions or call sites, not named by annotations or metadata.
    pub guessed: bool,
    /// How many.
    pub count: u64,
    /// What one window is, in a word or two: the annotation family (`micro_batch`,
    /// `request`), the function entered, the call site, `N events`, `whole trace`. Rates
    /// are per one of these.
    pub unit: String,
    /// Whether they are units of work to judge growth across (false: no verdicts).
    pub verdicts: bool,
    /// Their figures; for an explicit `--windows`, what they fail is a warning.
    pub quality: Option<Quality>,
    /// What `auto` weighed, most windows first (at most [`CANDIDATES_SHOWN`]).
    pub candidates: Vec<Candidate>,
}

/// Candidates kept in a report.
pub const CANDIDATES_SHOWN: usize = 12;

impl WindowInfo {
    /// Whether these are a series of snapshots' windows.
    pub fn is_series(&self) -> bool {
        self.source == WindowSource::Snapshots
    }

    /// The facts of `w`.
    pub fn of(w: &Windows) -> WindowInfo {
        WindowInfo {
            source: w.source,
            detail: w.detail.clone(),
            reason: w.reason.clone(),
            spec: w.spec.clone(),
            guessed: w.guessed,
            count: w.len() as u64,
            unit: unit_of(w),
            verdicts: w.verdicts,
            quality: w.quality.clone(),
            candidates: w
                .candidates
                .iter()
                .take(CANDIDATES_SHOWN)
                .cloned()
                .collect(),
        }
    }
}

/// What one of `w`'s windows is, in a word or two.
fn unit_of(w: &Windows) -> String {
    match w.source {
        WindowSource::Annotation => {
            let d = w.detail.trim_start_matches('^').trim_end_matches('$');
            d.trim_end_matches("\\d+")
                .trim_end_matches(['_', '#'])
                .to_string()
        }
        WindowSource::Metadata => "user_metadata value".into(),
        WindowSource::Frame => format!(
            "entry into {}",
            w.detail.trim_start_matches('^').trim_end_matches('$')
        ),
        WindowSource::Site => format!(
            "allocation at {}",
            w.detail.split(" via ").next().unwrap_or("")
        ),
        WindowSource::Every => format!("{} events", w.detail),
        WindowSource::Snapshots => "snapshot".into(),
        _ => "whole trace".into(),
    }
}

/// What the leak finder shows when the trace holds no repeated unit of work: no verdicts
/// (they need evidence across units), but what holds memory.
#[derive(Clone, Debug, Serialize)]
pub struct NoVerdicts {
    /// The peak of live bytes.
    pub peak: Point,
    /// The largest holders there.
    pub at_peak: Vec<TopRow>,
    /// The end of the trace.
    pub end: Point,
    /// The largest holders there.
    pub at_end: Vec<TopRow>,
}

/// Holder rows shown without verdicts.
const HOLDERS: usize = 10;

/// Trace facts that bear on the result.
#[derive(Clone, Debug, Serialize)]
pub struct TraceFacts {
    /// The trace misses its beginning (ring buffer wrapped or late start).
    pub wrapped: bool,
    /// Events in the trace.
    pub events: u64,
    /// What the free events' stacks are: `own` (the freeing code's, `context="all"`),
    /// `allocation` (each free carries its allocation's, as `context="alloc"` records
    /// them: who let go is not read from them), `none` (no free carries frames).
    pub free_stacks: &'static str,
}

/// The leak finder's findings on one device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceLeaks {
    /// Device.
    pub device: i64,
    /// Windows.
    pub windows: WindowInfo,
    /// Trace facts.
    pub trace: TraceFacts,
    /// Leaks and retained growth, largest rate first.
    pub suspects: Vec<Growth>,
    /// Warm-up, bounded, sporadic and in-flight growth (not suspects), most held first.
    pub not_suspects: Vec<Growth>,
    /// Retained groups among the suspects.
    pub groups: Vec<Group>,
    /// Set when the windows are not units of work (`windows.verdicts` is false): what
    /// holds memory instead of verdicts.
    pub no_verdicts: Option<NoVerdicts>,
    /// Other devices of the report are judged per a different unit (`windows.unit`): rates
    /// side by side are not alike.
    pub units_differ: bool,
    /// How to capture a trace that shows growth, when this one cannot (too few windows,
    /// wrapped, no unit of work).
    pub capture: Option<super::capture::CaptureAdvice>,
    /// Cached free memory growing per window while live memory does not (the session
    /// fills it in: it reads the device's segments and streams).
    pub reserved_growth: Option<super::reserved::ReservedGrowth>,
    /// Memory held until garbage collection: the collections and what they freed.
    pub gc_held: Option<super::gc_held::GcHeld>,
}

/// Marks the devices whose windows' unit differs from another judged device's.
pub fn mark_units(devices: &mut [DeviceLeaks]) {
    let judged: Vec<&str> = devices
        .iter()
        .filter(|d| d.windows.verdicts)
        .map(|d| d.windows.unit.as_str())
        .collect();
    let differ = judged.windows(2).any(|p| p[0] != p[1]);
    for d in devices.iter_mut() {
        d.units_differ = differ && d.windows.verdicts;
    }
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
        // Wide: the two middle values may add up past 64 bits.
        ((u128::from(v[n / 2 - 1]) + u128::from(v[n / 2])) / 2) as u64
    }
}

/// One key's survivors: bytes per window and the survivors' lifetime indices.
struct Survivors {
    key: u32,
    series: Vec<u64>,
    lifes: Vec<usize>,
    /// Allocations made before the first window and alive at the end of it: held by the
    /// site, though no window's growth.
    early: Vec<usize>,
}

/// The window `l` was born in, when it is a survivor there: alive at the end of the next
/// window (at the end of the trace for the last window).
fn survivor_window(l: &Lifetime, windows: &Windows, cursor: &mut WindowCursor) -> Option<usize> {
    let Origin::Traced(born) = l.origin else {
        return None;
    };
    let w = cursor.of_event(born)?;
    let n = windows.len();
    let events = windows.events;
    let horizon = if w + 1 < n {
        windows.range(w + 1).1
    } else {
        events
    };
    let survives = match l.freed {
        None => true,
        Some(f) => f >= horizon && horizon < events,
    };
    survives.then_some(w)
}

/// An activation freed by a backward: in flight (saved by its forward for its backward),
/// never growth, however many windows (layers) it spans.
fn in_flight(attr: &Attributor, li: usize) -> bool {
    attr.roles().is_some_and(|m| {
        m.freed_in_backward(li) && m.role(li) == crate::attribute::roles::Role::Activation.id()
    })
}

/// The survivor bytes of `lifes` by role, named, largest first; and the first role.
fn survivor_roles(lifes: &[usize], replay: &Replay, attr: &Attributor) -> (String, Vec<RoleBytes>) {
    let mut by: Vec<(crate::attribute::roles::RoleId, u64)> = Vec::new();
    for &i in lifes {
        let r = attr.role(i);
        let b = replay.lifetimes[i].bytes;
        match by.iter_mut().find(|x| x.0 == r) {
            Some(x) => x.1 = x.1.saturating_add(b),
            None => by.push((r, b)),
        }
    }
    by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let roles: Vec<RoleBytes> = by
        .iter()
        .map(|&(r, bytes)| RoleBytes {
            role: attr.roles().map_or("unknown", |m| m.name(r)).to_string(),
            bytes,
        })
        .collect();
    let first = roles
        .first()
        .map_or_else(|| "unknown".to_string(), |r| r.role.clone());
    (first, roles)
}

/// Allocations born in a window and alive at the end of the next one, per key.
fn survivors(replay: &Replay, windows: &Windows, attr: &mut Attributor) -> Vec<Survivors> {
    let n = windows.len();
    let mut per_key: Vec<Survivors> = Vec::new();
    // Lifetimes come by birth: the cursor walks the windows with them.
    let mut cursor = windows.cursor();
    let (first_start, first_end) = if n > 0 { windows.range(0) } else { (0, 0) };
    for (li, l) in replay.lifetimes.iter().enumerate() {
        let w = survivor_window(l, windows, &mut cursor);
        let early = w.is_none()
            && matches!(l.origin, Origin::Traced(b) if b < first_start)
            && l.freed.is_none_or(|f| f >= first_end);
        if w.is_none() && !early || in_flight(attr, li) {
            continue;
        }
        let Some(k) = attr.key_of(li, l) else {
            continue;
        };
        let k = k as usize;
        while per_key.len() <= k {
            per_key.push(Survivors {
                key: per_key.len() as u32,
                series: vec![0; n],
                lifes: Vec::new(),
                early: Vec::new(),
            });
        }
        match w {
            Some(w) => {
                per_key[k].series[w] = per_key[k].series[w].saturating_add(l.bytes);
                per_key[k].lifes.push(li);
            }
            None => per_key[k].early.push(li),
        }
    }
    per_key.retain(|s| !s.lifes.is_empty());
    per_key
}

/// Survivors of one allocation stack and role, summed over every window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSurvivors {
    /// The stack.
    pub stack: StackId,
    /// The survivors' role.
    pub role: crate::attribute::roles::RoleId,
    /// Survivor bytes over all windows.
    pub bytes: u64,
    /// Surviving allocations.
    pub blocks: u64,
    /// Windows in which the stack had survivors.
    pub windows: u64,
}

/// The survivors (as the leak finder counts them: in-flight activations left out) of each
/// allocation stack and role that has any, by stack then role. Allocations `attr` leaves
/// out (`--focus`) are not counted.
pub fn survivors_by_stack(
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
) -> Vec<StackSurvivors> {
    type Key = (StackId, crate::attribute::roles::RoleId);
    let mut per: FastMap<Key, (StackSurvivors, usize)> = FastMap::default();
    let mut cursor = windows.cursor();
    for (li, l) in replay.lifetimes.iter().enumerate() {
        let Some(w) = survivor_window(l, windows, &mut cursor) else {
            continue;
        };
        if in_flight(attr, li) || attr.key(l.stack).is_none() {
            continue;
        }
        let role = attr.role(li);
        let (s, last) = per.entry((l.stack, role)).or_insert((
            StackSurvivors {
                stack: l.stack,
                role,
                bytes: 0,
                blocks: 0,
                windows: 0,
            },
            usize::MAX,
        ));
        s.bytes = s.bytes.saturating_add(l.bytes);
        s.blocks += 1;
        if *last != w {
            // Traced allocations come in event order, so a stack's windows only grow.
            s.windows += 1;
            *last = w;
        }
    }
    let mut v: Vec<StackSurvivors> = per.into_values().map(|(s, _)| s).collect();
    v.sort_unstable_by_key(|s| (s.stack, s.role));
    v
}

/// The verdict on one key and the windows its rate is the median over.
struct Verdict {
    kind: Kind,
    onset: usize,
    rate_windows: Vec<usize>,
    /// Growth at every window, whatever gaps `rate_windows` leave (memory released in
    /// bursts: only the older windows of each burst give its rate).
    every_window: bool,
}

/// The run of growing windows (at most one window without growth inside it) that reaches
/// the end of the trace: its first window and the windows in it that grew.
fn tail_run(grew: &[bool], from: usize) -> Option<(usize, Vec<usize>)> {
    let mut gaps = 0;
    let mut run = Vec::new();
    for w in (from..grew.len()).rev() {
        if grew[w] {
            run.push(w);
        } else {
            gaps += 1;
            if gaps > 1 {
                break;
            }
        }
    }
    run.reverse();
    Some((*run.first()?, run))
}

/// How many window boundaries each released survivor outlived: the extremes.
fn release_spans(s: &Survivors, replay: &Replay, windows: &Windows) -> Option<(usize, usize)> {
    let (mut births, mut frees) = (windows.cursor(), windows.cursor());
    let spans = s.lifes.iter().filter_map(|&i| {
        let l = &replay.lifetimes[i];
        let Origin::Traced(b) = l.origin else {
            return None;
        };
        Some(frees.of_event(l.freed?)? - births.of_event(b)?)
    });
    spans.fold(None, |acc, x| match acc {
        None => Some((x, x)),
        Some((lo, hi)) => Some((lo.min(x), hi.max(x))),
    })
}

/// Memory freed in a later window than it was born in, or with the release window's own:
/// (release window, free event, birth window, lifetime).
type Freed = (usize, u32, usize, usize);

/// A release window's frees with no backward between them (a burst is one run): an index
/// range into the sorted frees, the earlier windows it frees memory of (the oldest, the
/// youngest, how many up to two) and whether the release window's own memory goes with it.
struct Run {
    from: usize,
    to: usize,
    oldest: usize,
    youngest: usize,
    older: usize,
    own: bool,
}

/// The runs of `freed` (sorted), cut where a backward runs between two frees.
fn release_runs(freed: &[Freed], roles: Option<&RoleMap>) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut i = 0;
    while i < freed.len() {
        let r = freed[i].0;
        let mut run = Run {
            from: i,
            to: i,
            oldest: usize::MAX,
            youngest: 0,
            older: 0,
            own: false,
        };
        while run.to < freed.len() && freed[run.to].0 == r {
            let x = freed[run.to];
            let cut = run.to > run.from
                && roles.is_some_and(|m| m.backward_between(freed[run.to - 1].1, x.1));
            if cut {
                break;
            }
            if x.2 == r {
                run.own = true;
            } else if run.older == 0 {
                (run.oldest, run.youngest, run.older) = (x.2, x.2, 1);
            } else if x.2 != run.oldest || x.2 != run.youngest {
                run.older = 2;
                run.oldest = run.oldest.min(x.2);
                run.youngest = run.youngest.max(x.2);
            }
            run.to += 1;
        }
        i = run.to;
        runs.push(run);
    }
    runs
}

/// Whether each release of the site's survivors frees memory of one window only, where
/// a backward runs between frees of different windows' memory: a pipeline's cool-down
/// hands back each micro-batch's input after its own backward, however many windows each
/// outlived (a mini-batch as short as the pipeline is deep is all warm-up and cool-down),
/// where memory kept to a coarser boundary goes together (a list of kept outputs dropped
/// at once).
fn freed_a_window_at_a_time(
    s: &Survivors,
    replay: &Replay,
    windows: &Windows,
    roles: Option<&RoleMap>,
) -> bool {
    let Some(roles) = roles else {
        return false;
    };
    let mut births = windows.cursor();
    let mut freed: Vec<Freed> = s
        .lifes
        .iter()
        .filter_map(|&i| {
            let l = &replay.lifetimes[i];
            let b = births.of_event(l.traced_birth()?)?;
            let f = l.freed?;
            Some((windows.at_or_before(f)?, f, b, i))
        })
        .collect();
    freed.sort_unstable();
    !freed.is_empty()
        && release_runs(&freed, Some(roles))
            .iter()
            .all(|run| run.older <= 1)
}

/// The verdict on one key's survivors; `bursts`: its memory is released in bursts
/// ([`BURST_SHARE`]), so it is never merely in flight.
fn classify(
    s: &Survivors,
    replay: &Replay,
    windows: &Windows,
    opts: &LeakOptions,
    bursts: bool,
    roles: Option<&RoleMap>,
) -> Verdict {
    let n = windows.len();
    let grew: Vec<usize> = (0..n).filter(|&w| s.series[w] > 0).collect();
    let counted: Vec<usize> = grew.iter().copied().filter(|&w| w >= opts.warmup).collect();
    let bytes = |i: &usize| replay.lifetimes[*i].bytes;
    let total = sum_sizes(s.lifes.iter().map(bytes));
    let at_end = sum_sizes(
        s.lifes
            .iter()
            .filter(|&&i| replay.lifetimes[i].freed.is_none())
            .map(bytes),
    );
    let kept_to_end = nine_tenths(at_end, total);
    let spans = release_spans(s, replay, windows);
    let stopped = counted.last().is_some_and(|&last| {
        let quiet = n - 1 - last;
        quiet >= STOPPED_MIN_WINDOWS && quiet >= counted.len()
    });
    let most = counted.len() >= 2 && counted.len() * 2 >= n.saturating_sub(opts.warmup) && !stopped;
    let onset = counted.first().or(grew.first()).copied().unwrap_or(0);
    let verdict = |kind, onset, rate_windows| Verdict {
        kind,
        onset,
        rate_windows,
        every_window: false,
    };
    if most {
        // Memory kept until a coarser boundary outlives a varying number of boundaries
        // (the sawtooth: the first micro-batch's buffer waits longest) and goes together;
        // micro-batches merely in flight in a pipeline schedule all outlive the same few,
        // or go a micro-batch at a time after each one's backward. The latter is not
        // growth.
        let in_flight = !bursts
            && !kept_to_end
            && (spans.is_some_and(|(lo, hi)| hi - lo <= 1)
                || freed_a_window_at_a_time(s, replay, windows, roles));
        let kind = match (in_flight, kept_to_end) {
            (true, _) => Kind::InFlight,
            (false, true) => Kind::Leak,
            (false, false) => Kind::Retained,
        };
        return verdict(kind, onset, grew);
    }
    if let Some(late) = late_leak(s, replay, windows, opts, spans) {
        return late;
    }
    if counted.len() >= KEPT_LEAK_MIN_WINDOWS
        && kept_to_end
        && counted.last().is_some_and(|&w| w * 2 >= n)
    {
        return verdict(Kind::Leak, onset, counted);
    }
    // A survivor of the last two windows is judged against the end of the trace alone:
    // what is alive then is in flight, not growth.
    let kind = if n > 2 && grew.iter().all(|&w| w + 2 >= n) && at_end == total {
        Kind::Late
    } else if counted.is_empty() || grew.len() == 1 {
        Kind::Warmup
    } else if *grew.last().unwrap_or(&0) * 2 < n {
        Kind::Bounded
    } else {
        Kind::Sporadic
    };
    verdict(kind, onset, grew)
}

/// A leak that starts late: the site's survivors grow in every window (one gap allowed)
/// of a run of at least three windows that reaches the end of the trace, and what the run
/// kept is never freed. The run must also be longer than the most boundaries any of the
/// site's earlier memory outlived before its release, so that micro-batches still in
/// flight when the snapshot was taken are not mistaken for it.
fn late_leak(
    s: &Survivors,
    replay: &Replay,
    windows: &Windows,
    opts: &LeakOptions,
    spans: Option<(usize, usize)>,
) -> Option<Verdict> {
    let n = windows.len();
    let grew: Vec<bool> = s.series.iter().map(|&b| b > 0).collect();
    let (start, run) = tail_run(&grew, opts.warmup)?;
    let reaches_end = run.last().is_some_and(|&w| w + 2 >= n);
    let longest_kept = spans.map_or(0, |(_, hi)| hi);
    if run.len() < 3 || !reaches_end || n - start <= longest_kept + 1 {
        return None;
    }
    let (mut kept, mut born) = (0u64, 0u64);
    let mut births = windows.cursor();
    for &i in &s.lifes {
        let l: &Lifetime = &replay.lifetimes[i];
        let Origin::Traced(b) = l.origin else {
            continue;
        };
        if births.of_event(b).is_some_and(|w| w >= start) {
            born = born.saturating_add(l.bytes);
            if l.freed.is_none() {
                kept = kept.saturating_add(l.bytes);
            }
        }
    }
    (born > 0 && nine_tenths(kept, born)).then_some(Verdict {
        kind: Kind::Leak,
        onset: start,
        rate_windows: run,
        every_window: false,
    })
}

/// Whether `part` is at least nine tenths of `whole` (wide: sizes can be near 2^64).
fn nine_tenths(part: u64, whole: u64) -> bool {
    u128::from(part) * 10 >= u128::from(whole) * 9
}

/// Bytes of `lifes` alive at each window end and at the end: the most held at once.
fn most_held(lifes: &[usize], replay: &Replay, windows: &Windows) -> u64 {
    let mut deltas: Vec<(u32, i128)> = Vec::with_capacity(lifes.len() * 2);
    for &i in lifes {
        let l = &replay.lifetimes[i];
        if let Origin::Traced(b) = l.origin {
            deltas.push((b, l.bytes as i128));
        }
        if let Some(f) = l.freed {
            deltas.push((f, -(l.bytes as i128)));
        }
    }
    deltas.sort_unstable();
    let (mut most, mut cur, mut di) = (0i128, 0i128, 0);
    let ends = (0..windows.len())
        .map(|w| windows.range(w).1)
        .chain(std::iter::once(windows.events));
    for e in ends {
        while di < deltas.len() && deltas[di].0 < e {
            cur += deltas[di].1;
            di += 1;
        }
        most = most.max(cur);
    }
    u64::try_from(most.max(0)).unwrap_or(u64::MAX)
}

/// Where a retained site's memory goes: the release is a burst (everything kept since the
/// last boundary goes at once), so the first free of this site's memory that outlived a
/// boundary, survivor or not, in the window of the first survivor's release.
fn release_of(
    s: &Survivors,
    v: &Verdict,
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
) -> Option<Release> {
    // Memory let go in bursts: the burst is what the older windows kept (what the
    // youngest passed on may go in the same window, freed elsewhere).
    let mut births = windows.cursor();
    let mut kept_by_rate_windows = |l: &Lifetime| {
        !v.every_window
            || l.traced_birth()
                .and_then(|b| births.of_event(b))
                .is_some_and(|w| v.rate_windows.binary_search(&w).is_ok())
    };
    let freed: Vec<&Lifetime> = s
        .lifes
        .iter()
        .map(|&i| &replay.lifetimes[i])
        .filter(|l| l.freed.is_some() && kept_by_rate_windows(l))
        .collect();
    let first = freed.iter().min_by_key(|l| l.freed)?;
    let mut frees = windows.cursor();
    let mut wins: Vec<usize> = freed
        .iter()
        .filter_map(|l| frees.of_event(l.freed?))
        .collect();
    wins.sort_unstable();
    wins.dedup();
    let first_free = first.freed?;
    let burst = windows.of_event(first_free);
    let mut burst_start = first_free;
    // A burst judged on its own memory starts at that memory's first free.
    if !v.every_window {
        for (li, l) in replay.lifetimes.iter().enumerate() {
            let (Some(b), Some(f)) = (l.traced_birth(), l.freed) else {
                continue;
            };
            if f < burst_start
                && windows.of_event(f) == burst
                && windows.of_event(b) < burst
                && attr.key_of(li, l) == Some(s.key)
            {
                burst_start = f;
            }
        }
    }
    let snap = attr.snapshot();
    let trace = snap.trace(replay.device);
    let site = match attr.roles() {
        Some(r) => r.recorded.releaser_stack(first, trace),
        None => first.free_stack(trace),
    }
    .filter(|st| !snap.stacks.get(*st).is_empty())
    .and_then(|st| attr.key(st))
    .map(|k| attr.site(k).clone());
    Some(Release {
        event_index: burst_start,
        site,
        release_windows: wins.len() as u64,
    })
}

/// Sites judged in flight, sporadic, bounded (a cache that filled up is not emptied again
/// and again) or late, or not at all (nothing alive past the next window), whose memory is
/// released in bursts ([`BURST_SHARE`]): judged again on the memory they carry past each
/// window's own end, and taken as that verdict when it is a suspect.
fn rejudge_bursts(
    judged: &mut Vec<(Survivors, Verdict)>,
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
    opts: &LeakOptions,
) {
    // Per site judged in flight, sporadic, bounded or late: its entry in `judged`.
    let mut look: FastMap<u32, usize> = FastMap::default();
    for (i, (s, v)) in judged.iter().enumerate() {
        if matches!(
            v.kind,
            Kind::InFlight | Kind::Sporadic | Kind::Bounded | Kind::Late
        ) {
            look.insert(s.key, i);
        }
    }
    let settled: FastSet<u32> = judged
        .iter()
        .filter(|(s, _)| !look.contains_key(&s.key))
        .map(|(s, _)| s.key)
        .collect();
    let mut found = carried(&settled, replay, windows, attr);
    found.sort_by_key(|c| c.key);
    for c in found {
        let entry = look.get(&c.key).copied();
        let Some(bursts) = released_in_bursts(&c, replay, windows, attr.roles()) else {
            continue;
        };
        let mut s = Survivors {
            key: c.key,
            series: vec![0; windows.len()],
            lifes: bursts.lifes,
            early: entry.map_or_else(Vec::new, |i| std::mem::take(&mut judged[i].0.early)),
        };
        let mut births = windows.cursor();
        for &li in &s.lifes {
            let l = &replay.lifetimes[li];
            if let Some(w) = l.traced_birth().and_then(|b| births.of_event(b)) {
                s.series[w] = s.series[w].saturating_add(l.bytes);
            }
        }
        let mut v = classify(&s, replay, windows, opts, true, attr.roles());
        if v.kind == Kind::Retained {
            v.rate_windows = bursts.rate_windows;
            v.every_window = true;
        }
        match entry {
            Some(i) if v.kind.is_suspect() => judged[i] = (s, v),
            Some(i) => judged[i].0.early = s.early,
            None if v.kind.is_suspect() => judged.push((s, v)),
            None => {}
        }
    }
}

/// One site's memory alive at the end of the window it was born in (in-flight activations
/// left out), in birth order; and, with the window, its memory freed in the window it was
/// born in, in the windows that free carried memory of one earlier window only (where a
/// boundary's release of a mini-batch of two clears the release window's own memory with
/// the rest).
struct Carried {
    key: u32,
    lifes: Vec<usize>,
    own: Vec<(usize, usize)>,
}

/// What each site but those `settled` carries past its windows' ends.
fn carried(
    settled: &FastSet<u32>,
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
) -> Vec<Carried> {
    let mut out: FastMap<u32, Carried> = FastMap::default();
    // Per site: (release window, birth window) of its carried memory freed later.
    let mut released: FastMap<u32, Vec<(usize, usize)>> = FastMap::default();
    let mut births = windows.cursor();
    for (li, l) in replay.lifetimes.iter().enumerate() {
        let Some(w) = l.traced_birth().and_then(|b| births.of_event(b)) else {
            continue;
        };
        let end = windows.range(w).1;
        if l.freed.is_some_and(|f| f < end) || in_flight(attr, li) {
            continue;
        }
        let Some(k) = attr.key_of(li, l).filter(|k| !settled.contains(k)) else {
            continue;
        };
        if let Some(r) = l.freed.and_then(|f| windows.at_or_before(f)) {
            released.entry(k).or_default().push((r, w));
        }
        out.entry(k)
            .or_insert_with(|| Carried {
                key: k,
                lifes: Vec::new(),
                own: Vec::new(),
            })
            .lifes
            .push(li);
    }
    // Per site: the windows that free its carried memory of one earlier window only.
    let single: FastMap<u32, Vec<usize>> = released
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_unstable();
            v.dedup();
            let mut one: Vec<usize> = v
                .chunk_by(|a, b| a.0 == b.0)
                .filter(|g| g.len() == 1)
                .map(|g| g[0].0)
                .collect();
            one.dedup();
            (k, one)
        })
        .filter(|(_, one)| !one.is_empty())
        .collect();
    if !single.is_empty() {
        let mut births = windows.cursor();
        for (li, l) in replay.lifetimes.iter().enumerate() {
            let Some(w) = l.traced_birth().and_then(|b| births.of_event(b)) else {
                continue;
            };
            if l.freed.is_none_or(|f| f >= windows.range(w).1) {
                continue;
            }
            let Some(k) = attr.key_of(li, l) else {
                continue;
            };
            if single
                .get(&k)
                .is_some_and(|one| one.binary_search(&w).is_ok())
            {
                if let Some(c) = out.get_mut(&k) {
                    c.own.push((li, w));
                }
            }
        }
    }
    out.into_values().collect()
}

/// What a site carried and let go in bursts.
struct Bursts {
    /// The carried memory released in bursts, and what is never freed (without the
    /// memory merely passed on to a later window).
    lifes: Vec<usize>,
    /// The windows a burst frees memory of, each burst's youngest left out: memory
    /// passed on to the next window may go in the same window as the burst, so only
    /// the older windows show what one window keeps.
    rate_windows: Vec<usize>,
}

/// The part of a site's carried memory released in bursts, when it is released in bursts
/// ([`BURST_MIN_RELEASES`], [`BURST_SHARE`]).
fn released_in_bursts(
    c: &Carried,
    replay: &Replay,
    windows: &Windows,
    roles: Option<&RoleMap>,
) -> Option<Bursts> {
    let mut births = windows.cursor();
    let mut freed: Vec<Freed> = Vec::new();
    let mut kept: Vec<usize> = Vec::new();
    // Windows whose memory goes on past the next window (to a later one, or the end).
    let mut carried_on: Vec<usize> = Vec::new();
    for &li in &c.lifes {
        let l = &replay.lifetimes[li];
        let Some(b) = l.traced_birth().and_then(|b| births.of_event(b)) else {
            continue;
        };
        // A free between two windows belongs to the one before: a boundary's release.
        match l.freed.map(|f| (f, windows.at_or_before(f))) {
            None => {
                kept.push(li);
                // Alive at the end from the last window: whether it would have gone past
                // the next window, the trace does not say.
                if b + 1 < windows.len() {
                    carried_on.push(b);
                }
            }
            Some((f, Some(r))) if r > b => {
                freed.push((r, f, b, li));
                if r > b + 1 {
                    carried_on.push(b);
                }
            }
            Some(_) => {}
        }
    }
    // The release windows' own memory: in a burst, one more window it was born in.
    for &(li, w) in &c.own {
        if let Some(f) = replay.lifetimes[li].freed {
            freed.push((w, f, w, li));
        }
    }
    carried_on.sort_unstable();
    carried_on.dedup();
    freed.sort_unstable();
    let runs = release_runs(&freed, roles);
    // Windows freeing memory of one earlier window with their own together: a mini-batch
    // of two's end where they are alone, a conveyor (each window frees what the one before
    // handed it with its own scratch) where they follow each other.
    let mut pairs: Vec<usize> = runs
        .iter()
        .filter(|run| run.older == 1 && run.own)
        .map(|run| freed[run.from].0)
        .collect();
    pairs.dedup();
    let paired = |w: usize| pairs.binary_search(&w).is_ok();
    let bytes = |x: &Freed| u128::from(replay.lifetimes[x.3].bytes);
    // Handed to the next window only: in flight ([`BURST_SHARE`]).
    let in_flight = |x: &&Freed| x.2 + 1 >= x.0;
    let (mut bursts, mut burst_bytes, mut all_bytes) = (0, 0u128, 0u128);
    let mut rate_windows = Vec::new();
    for release in runs.chunk_by(|a, b| freed[a.from].0 == freed[b.from].0) {
        let r = freed[release[0].from].0;
        // Closing: what the release window made itself goes no further (a conveyor
        // passes it on to a later window).
        let closes = carried_on.binary_search(&r).is_err();
        let mut burst = false;
        for run in release {
            let items = &freed[run.from..run.to];
            // Born in two windows or more: two earlier ones, or one and the release
            // window itself, a pair neither window beside it makes.
            let alone = !paired(r + 1) && r.checked_sub(1).is_none_or(|p| !paired(p));
            let several = run.older >= 2 || run.older == 1 && run.own && alone;
            if !closes || !several {
                all_bytes += items
                    .iter()
                    .filter(|x| !in_flight(x))
                    .map(bytes)
                    .sum::<u128>();
                continue;
            }
            burst = true;
            let sum: u128 = items.iter().map(bytes).sum();
            all_bytes += sum;
            burst_bytes += sum;
            kept.extend(items.iter().filter(|x| x.2 < r).map(|x| x.3));
            // Memory passed on to the next window may go in the same burst: where two
            // earlier windows or more are freed, the youngest says nothing of what one
            // window keeps.
            if run.older >= 2 {
                rate_windows.extend(items.iter().map(|x| x.2).filter(|&b| b < run.youngest));
            } else {
                rate_windows.push(run.oldest);
            }
        }
        bursts += usize::from(burst);
    }
    let (num, den) = BURST_SHARE;
    if bursts < BURST_MIN_RELEASES || burst_bytes * (den as u128) < all_bytes * (num as u128) {
        return None;
    }
    kept.sort_unstable();
    rate_windows.sort_unstable();
    rate_windows.dedup();
    Some(Bursts {
        lifes: kept,
        rate_windows,
    })
}

fn growth(
    s: &Survivors,
    v: &Verdict,
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
) -> Growth {
    let snap = attr.snapshot();
    let grew: Vec<usize> = (0..windows.len()).filter(|&w| s.series[w] > 0).collect();
    let first_life = &replay.lifetimes[s.lifes[0]];
    let released_at = if v.kind == Kind::Retained {
        release_of(s, v, replay, windows, attr)
    } else {
        None
    };
    let (role, roles) = survivor_roles(&s.lifes, replay, attr);
    let names = attr.names_of(s.lifes.iter().map(|&i| (i, replay.lifetimes[i].bytes)));
    let occurrence = median(v.rate_windows.iter().map(|&w| s.series[w]).collect());
    let period = period_of(&v.rate_windows).filter(|_| !v.every_window);
    let held = growing_allocations(s, replay, windows);
    Growth {
        site: attr.site(s.key).clone(),
        role,
        roles,
        names,
        kind: v.kind,
        bytes_per_window: occurrence / period.unwrap_or(1).max(1),
        bytes_per_occurrence: occurrence,
        period_windows: period,
        windows_growing: grew.len() as u64,
        windows_total: windows.len() as u64,
        onset_window: v.onset as u64,
        retained_bytes: most_held(&held, replay, windows),
        bytes_at_end: sum_sizes(
            held.iter()
                .map(|&i| &replay.lifetimes[i])
                .filter(|l| l.freed.is_none())
                .map(|l| l.bytes),
        ),
        blocks: held.len() as u64,
        first_window: grew.first().copied().unwrap_or(0) as u64,
        last_window: grew.last().copied().unwrap_or(0) as u64,
        released_at,
        group: None,
        example_addresses: s
            .lifes
            .iter()
            .take(3)
            .map(|&i| format!("0x{:x}", replay.lifetimes[i].addr))
            .collect(),
        stack: crate::attribute::stack_labels(snap, first_life.stack),
        survivors_per_window: s.series.clone(),
        // Only a series' names tell windows apart (annotation names repeat per step).
        onset_name: windows
            .names
            .get(v.onset)
            .filter(|n| windows.is_series() && !n.is_empty())
            .cloned(),
    }
}

/// Windows between two growths: the median gap between the windows a verdict rests on,
/// when it is more than one (`None`: every window, or a single one).
fn period_of(windows: &[usize]) -> Option<u64> {
    let gaps: Vec<u64> = windows.windows(2).map(|p| (p[1] - p[0]) as u64).collect();
    let p = median(gaps);
    (p > 1).then_some(p)
}

/// The allocations a site's held bytes count: its survivors, and what it kept from before
/// the first window; leaving out the stacks whose only survivors are the last window's
/// (outputs in flight when the trace ended) when other stacks of the site grew earlier:
/// a user frame that makes a tiny leak and the last micro-batch's logits holds the leak.
fn growing_allocations(s: &Survivors, replay: &Replay, windows: &Windows) -> Vec<usize> {
    let n = windows.len();
    let mut cursor = windows.cursor();
    let mut earlier: Vec<StackId> = s
        .lifes
        .iter()
        .filter_map(|&i| {
            let l = &replay.lifetimes[i];
            let Origin::Traced(b) = l.origin else {
                return None;
            };
            cursor.of_event(b).filter(|&w| w + 1 < n).map(|_| l.stack)
        })
        .collect();
    earlier.sort_unstable();
    earlier.dedup();
    let mut all: Vec<usize> = s.lifes.iter().chain(&s.early).copied().collect();
    if !earlier.is_empty() {
        all.retain(|&i| earlier.binary_search(&replay.lifetimes[i].stack).is_ok());
    }
    all.sort_unstable();
    all
}

fn without_verdicts(replay: &Replay, windows: &Windows, attr: &mut Attributor) -> DeviceLeaks {
    let trace = facts(replay, windows, attr);
    let snap = attr.snapshot();
    let peak = point_after(snap, replay, At::Peak, replay.peak().0);
    let end = point_after(snap, replay, At::End, replay.last_event());
    DeviceLeaks {
        device: replay.device,
        windows: WindowInfo::of(windows),
        suspects: Vec::new(),
        not_suspects: Vec::new(),
        groups: Vec::new(),
        no_verdicts: Some(NoVerdicts {
            at_peak: top::top(replay, peak.clone(), attr, HOLDERS).rows,
            peak,
            at_end: top::top(replay, end.clone(), attr, HOLDERS).rows,
            end,
        }),
        units_differ: false,
        capture: super::capture::advice(windows, trace.wrapped),
        trace,
        reserved_growth: None,
        gc_held: None,
    }
}

fn facts(replay: &Replay, windows: &Windows, attr: &Attributor) -> TraceFacts {
    let free_stacks = match attr.roles().map(|r| r.recorded) {
        Some(r) if r.free_stacks_are_allocations => "allocation",
        Some(r) if !r.free_stacks => "none",
        _ => "own",
    };
    TraceFacts {
        wrapped: replay.pre_trace_blocks > 0 || replay.unmatched_frees > 0,
        events: windows.events as u64,
        free_stacks,
    }
}

/// Finds the sites that grow per window on one device; on windows that are not units of
/// work, no verdicts but what holds memory.
pub fn leaks(
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
    opts: &LeakOptions,
) -> DeviceLeaks {
    if !windows.verdicts {
        return without_verdicts(replay, windows, attr);
    }
    let mut suspects: Vec<(Growth, Survivors)> = Vec::new();
    let mut others = Vec::new();
    let mut judged: Vec<(Survivors, Verdict)> = survivors(replay, windows, attr)
        .into_iter()
        .map(|s| {
            let v = classify(&s, replay, windows, opts, false, attr.roles());
            (s, v)
        })
        .collect();
    rejudge_bursts(&mut judged, replay, windows, attr, opts);
    for (s, v) in judged {
        let g = growth(&s, &v, replay, windows, attr);
        if g.bytes_per_window < opts.min_bytes {
            continue;
        }
        if g.kind.is_suspect() {
            suspects.push((g, s));
        } else {
            others.push(g);
        }
    }
    let gc = super::gc_held::gc_held(replay, windows, attr);
    if let Some(gc) = &gc {
        // Sites the collector freed are gc-held, whatever rhythm their growth had.
        let collected = |g: &Growth| gc.sites.iter().any(|s| s.site == g.site);
        for g in others.iter_mut().filter(|g| collected(g)) {
            g.kind = Kind::GcHeld;
        }
        let (held, kept): (Vec<_>, Vec<_>) = suspects.into_iter().partition(|(g, _)| collected(g));
        suspects = kept;
        others.extend(held.into_iter().map(|(mut g, _)| {
            g.kind = Kind::GcHeld;
            g
        }));
    }
    suspects.sort_by(|a, b| {
        b.0.bytes_per_window
            .cmp(&a.0.bytes_per_window)
            .then_with(|| a.0.site.label.cmp(&b.0.site.label))
    });
    others.sort_by(|a, b| {
        b.retained_bytes
            .cmp(&a.retained_bytes)
            .then_with(|| a.site.label.cmp(&b.site.label))
    });
    let mut groups = group_suspects(&mut suspects, replay, windows, attr);
    for (g, _) in &suspects {
        let Some(gr) = g.group.and_then(|i| groups.get_mut(i as usize)) else {
            continue;
        };
        for rb in &g.roles {
            match gr.roles.iter_mut().find(|x| x.role == rb.role) {
                Some(x) => x.bytes = x.bytes.saturating_add(rb.bytes),
                None => gr.roles.push(rb.clone()),
            }
        }
    }
    for gr in &mut groups {
        gr.roles
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.role.cmp(&b.role)));
    }
    let trace = facts(replay, windows, attr);
    DeviceLeaks {
        device: replay.device,
        windows: WindowInfo::of(windows),
        suspects: suspects.into_iter().map(|s| s.0).collect(),
        not_suspects: others,
        groups,
        no_verdicts: None,
        units_differ: false,
        capture: super::capture::advice(windows, trace.wrapped),
        trace,
        reserved_growth: None,
        gc_held: gc,
    }
}

/// Retained groups: suspects of the same kind whose survivors are released in the same
/// windows (or never), i.e. freed together. Growth windows may differ by one or two at
/// the edges of a schedule, so they do not split a group. The likely root is the member
/// whose kept memory was allocated first (what is kept is allocated before what it keeps
/// alive); allocations kept across a boundary count even when born before the first
/// window (a pipeline receives its first input then).
fn group_suspects(
    suspects: &mut [(Growth, Survivors)],
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut sigs: Vec<(Kind, Vec<usize>)> = Vec::new();
    let mut members: Vec<Vec<u32>> = Vec::new();
    for (g, s) in suspects.iter_mut() {
        let mut frees = windows.cursor();
        let mut rel: Vec<usize> = s
            .lifes
            .iter()
            .filter_map(|&i| replay.lifetimes[i].freed)
            .filter_map(|f| frees.of_event(f))
            .collect();
        rel.sort_unstable();
        rel.dedup();
        let sig = (g.kind, rel);
        let gi = sigs.iter().position(|x| *x == sig).unwrap_or_else(|| {
            sigs.push(sig);
            members.push(Vec::new());
            groups.push(Group {
                id: groups.len() as u64,
                root: g.site.clone(),
                members: Vec::new(),
                bytes_per_window: 0,
                roles: Vec::new(),
            });
            groups.len() - 1
        });
        g.group = Some(gi as u64);
        groups[gi].members.push(g.site.clone());
        groups[gi].bytes_per_window = groups[gi]
            .bytes_per_window
            .saturating_add(g.bytes_per_window);
        members[gi].push(s.key);
    }
    if groups.is_empty() {
        return groups;
    }
    let mut first_kept: FastMap<u32, u32> = FastMap::default();
    let (mut births, mut frees) = (windows.cursor(), windows.cursor());
    for (li, l) in replay.lifetimes.iter().enumerate() {
        let Origin::Traced(b) = l.origin else {
            continue;
        };
        let crossed = l
            .freed
            .is_none_or(|f| frees.of_event(f) != births.of_event(b));
        if crossed && let Some(k) = attr.key_of(li, l) {
            let e = first_kept.entry(k).or_insert(b);
            *e = (*e).min(b);
        }
    }
    for (gi, keys) in members.iter().enumerate() {
        let root = keys.iter().min_by_key(|&&k| {
            (
                first_kept.get(&k).copied().unwrap_or(u32::MAX),
                attr.site(k).label.clone(),
            )
        });
        if let Some(&k) = root {
            groups[gi].root = attr.site(k).clone();
        }
    }
    groups
}
