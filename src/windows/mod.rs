//! Stage 4, `windows`: cutting a device's trace into repeated units of work
//! (micro-batches, steps), so growth can be measured per unit.
//!
//! Sources, as `--windows SPEC`: `annotation[:REGEX]` (a window per matching
//! `record_function` START in `external_annotations`), `metadata` (a window per change of
//! `user_metadata`), `frame:REGEX` (a window starts at each allocation whose filtered
//! stack has a frame whose function matches, when the previous allocation's had none),
//! `site:REGEX` (a window per allocation at matching call stacks), `pipeline` (a pipeline
//! schedule's micro-batches), `every:N` events, and `auto`. A window runs from its start
//! to the next window's start (the last one to the end of the trace), so every event after
//! the first start belongs to exactly one window.
//!
//! `auto` measures its candidates (`quality`): a unit of work frees most of what it
//! allocates, repeats alike (in length and in the call stacks it allocates from) and covers
//! the trace. Annotation and metadata families and a pipeline schedule's micro-batches
//! (excused what its warm-up and cool-down explain) that qualify come first; else entries
//! into each function and the allocations of each call site. Of the families that
//! qualify, the coarsest with enough windows to judge growth on wins: a micro-batch rather than its
//! layers, and rather than its step when the trace holds only a few steps (memory kept to
//! the end of a step, the pipeline case, only shows as growth per micro-batch). When
//! nothing qualifies the whole trace is one window and there are no per-window verdicts.

mod one_call;
mod pipeline;
mod quality;
mod set;
mod source;
mod sources;
mod spec;

use rayon::prelude::*;

use crate::attribute::Attributor;
use crate::model::Snapshot;
use crate::replay::Replay;

pub use quality::{
    Allocations, EVIDENCE, Failure, MIN_ALIKE_EVENTS, MIN_ALIKE_WINDOWS, MIN_COVERAGE,
    MIN_SAME_WORK, MIN_SELF_FREED, MIN_WINDOWS, Quality,
};
pub use set::{Candidate, WindowCursor, Windows};
pub use source::WindowSource;
pub use sources::annotation_spans;
pub use spec::{FORMS as SPEC_FORMS, SpecError, WindowSpec, Within};

use sources::Family;

/// Candidate families of functions and call sites measured in full, at most.
const EVALUATIONS: usize = 64;
/// Of the candidates with the same number of windows, the ones measured in full.
const PER_COUNT: usize = 3;
/// A family cleans up "nearly as well as the best" within this share of it.
const NEARLY_BEST: f64 = 0.9;

/// Cuts the trace of `replay`'s device into windows per `spec`.
pub fn windows(snap: &Snapshot, replay: &Replay, spec: &WindowSpec, attr: &Attributor) -> Windows {
    let device = replay.device;
    let events = snap.trace(device).len() as u32;
    let allocs = Allocations::of(replay);
    let family = match spec {
        WindowSpec::Auto => return auto(snap, replay, attr, &allocs),
        WindowSpec::Annotation(re) => sources::annotation_families(snap, device, re.as_ref())
            .into_iter()
            .max_by_key(|f| f.starts.len()),
        WindowSpec::Metadata => sources::metadata_family(snap, device),
        WindowSpec::Frame(re) => Some(sources::frame_family(snap, device, attr, re)),
        WindowSpec::Site(re) => Some(sources::site_family(snap, device, re)),
        WindowSpec::Pipeline => pipeline::micro_batch_families(snap, device, attr)
            .into_iter()
            .max_by_key(|f| f.starts.len()),
        WindowSpec::Every(n) => Some(Family {
            source: WindowSource::Every,
            detail: n.to_string(),
            starts: (0..events).step_by(*n as usize).collect(),
            names: Vec::new(),
            spec: spec.to_string(),
            schedule: false,
        }),
    };
    match family.filter(|f| !f.starts.is_empty()) {
        Some(mut f) => {
            f.spec = spec.to_string();
            let mut q = quality::measure(&f.starts, events, &allocs);
            if f.schedule {
                pipeline::excuse(&mut q);
            }
            let reason = format!("as asked: {}", spec);
            build(device, events, f, reason, false, q)
        }
        None => whole_trace(
            device,
            events,
            format!(
                "--windows {spec} found nothing to cut the trace by{}: the whole trace is one window",
                unmatched(snap, device, spec)
            ),
            Vec::new(),
        ),
    }
}

/// Why an annotation spec found nothing, when the annotations say: the names the device's
/// `record_function` ranges have instead, or that it has none (torch writes them into
/// the snapshot from 2.5 on).
fn unmatched(snap: &Snapshot, device: i64, spec: &WindowSpec) -> String {
    if !matches!(spec, WindowSpec::Annotation(_)) {
        return String::new();
    }
    let mut names: Vec<String> = crate::model::annotation_ranges(snap, device)
        .iter()
        .map(|r| crate::model::name_family(r.name))
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        return " (the snapshot holds no record_function annotations for this device: torch \
                records them from 2.5 on, for ranges inside torch.profiler.record_function)"
            .into();
    }
    const SHOWN: usize = 5;
    let more = names.len().saturating_sub(SHOWN);
    names.truncate(SHOWN);
    format!(
        " (no annotation matches; the device's are {}{})",
        names.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

fn build(
    device: i64,
    events: u32,
    f: Family,
    reason: String,
    guessed: bool,
    q: Quality,
) -> Windows {
    let names = if f.names.is_empty() {
        vec![String::new(); f.starts.len()]
    } else {
        f.names
    };
    // Growth is what a window keeps that the windows before it did not: with one window,
    // all it keeps is warm-up, and no limit on growth can be judged (one rule, which the
    // leak finder, `check` and the test helpers all read as `verdicts`).
    let judged = f.starts.len() >= 2;
    let reason = if judged {
        reason
    } else {
        format!("{reason}; one window: growth is judged across at least two")
    };
    Windows {
        device,
        source: f.source,
        detail: f.detail,
        reason,
        spec: Some(f.spec),
        guessed,
        starts: f.starts,
        ends: Vec::new(),
        events,
        names,
        verdicts: judged,
        quality: Some(q),
        candidates: Vec::new(),
    }
}

/// The windows of a series of snapshots (see [`crate::load::series`]): window `k` is
/// what changed between file `k` and file `k + 1`, named after file `k + 1`. Each file
/// was taken at the end of a unit of work by whoever took them, so they are units of work
/// to judge growth across (verdicts) when there are at least two.
pub fn of_series(device: i64, starts: Vec<u32>, events: u32, files: &[String]) -> Windows {
    let n = starts.len();
    Windows {
        device,
        source: WindowSource::Snapshots,
        detail: format!("{} files", files.len()),
        reason: if n >= 2 {
            "one window per file after the first: what changed since the file before".into()
        } else {
            format!(
                "{} files give {n} window of change: judging growth needs at least 3 files, one per step",
                files.len()
            )
        },
        spec: None,
        guessed: false,
        starts,
        ends: Vec::new(),
        events,
        names: files.iter().skip(1).take(n).cloned().collect(),
        verdicts: n >= 2,
        quality: None,
        candidates: Vec::new(),
    }
}

/// The windows a series of snapshots brings, per device: one per file after the first.
#[derive(Clone, Debug)]
pub struct SeriesWindows {
    files: Vec<String>,
    starts: std::collections::BTreeMap<i64, Vec<u32>>,
}

impl SeriesWindows {
    /// The files in order and, per device, where each window's events start (see
    /// [`crate::load::series::Series::starts`]).
    pub fn new(files: Vec<String>, starts: std::collections::BTreeMap<i64, Vec<u32>>) -> Self {
        SeriesWindows { files, starts }
    }

    /// The windows of `device`, whose stitched trace holds `events` events.
    pub fn windows(&self, device: i64, events: u32) -> Windows {
        let starts = self
            .starts
            .get(&device)
            .cloned()
            .unwrap_or_else(|| vec![0; self.files.len().saturating_sub(1)]);
        of_series(device, starts, events, &self.files)
    }
}

fn whole_trace(device: i64, events: u32, reason: String, candidates: Vec<Candidate>) -> Windows {
    Windows {
        device,
        source: WindowSource::WholeTrace,
        detail: String::new(),
        reason,
        spec: None,
        guessed: false,
        starts: vec![0],
        ends: Vec::new(),
        events,
        names: vec![String::new()],
        verdicts: false,
        quality: None,
        candidates,
    }
}

/// A measured family.
struct Measured {
    family: Family,
    quality: Quality,
}

impl Measured {
    fn candidate(&self) -> Candidate {
        Candidate {
            source: self.family.source,
            detail: self.family.detail.clone(),
            spec: self.family.spec.clone(),
            quality: self.quality.clone(),
        }
    }
}

/// The unit of work among the measured families. Of those that qualify and clean up
/// nearly as well as the best (a micro-batch that frees what it allocates as well as its
/// step is a unit; one that hands its activations to the next, as a pipeline's first
/// stages do, is not, and the step is), the coarsest with enough windows to judge growth
/// on ([`EVIDENCE`]): the outermost repetition, a micro-batch rather than its layers
/// (which clean up too when nothing is kept for backward); else the coarsest there is.
fn unit_of_work(measured: &[Measured]) -> Option<Choice> {
    let best = measured
        .iter()
        .filter(|m| m.quality.qualifies())
        .map(|m| m.quality.self_freed)
        .fold(f64::NAN, f64::max);
    let units = measured.iter().filter(|m| m.quality.qualifies()).count();
    let ok: Vec<usize> = (0..measured.len())
        .filter(|&i| measured[i].quality.qualifies())
        .filter(|&i| measured[i].quality.self_freed >= NEARLY_BEST * best)
        .collect();
    // Fewer windows first; of as many, the one that frees more in place.
    let coarser = |a: &usize, b: &usize| {
        let (qa, qb) = (&measured[*a].quality, &measured[*b].quality);
        qa.windows
            .cmp(&qb.windows)
            .then(qb.self_freed.total_cmp(&qa.self_freed))
    };
    let coarsest = ok
        .iter()
        .copied()
        .filter(|&i| measured[i].quality.windows as usize >= EVIDENCE)
        .min_by(coarser);
    // A coarser unit that the chosen one only cuts into pieces (every start of the
    // coarser is a start of the finer, two or more of its windows in each): those are
    // its layers, whose windows read what a pass holds to its end as kept. The coarser
    // is the unit, however few its windows (two mini-batches of two micro-batches).
    // The program's own marks (annotations, metadata, a schedule's micro-batches) are
    // taken at their word: micro-batches marked inside marked steps stay the unit.
    let split = |fine: usize| {
        let f = &measured[fine].family;
        let guessed = matches!(f.source, WindowSource::Frame | WindowSource::Site) && !f.schedule;
        ok.iter()
            .filter(|_| guessed)
            .copied()
            .filter(|&c| splits(&measured[fine].family.starts, &measured[c].family.starts))
            .min_by(coarser)
    };
    let (index, rule) = match coarsest {
        Some(i) => match split(i) {
            Some(c) => (c, Rule::SplitByFiner),
            None => (i, Rule::Coarsest),
        },
        // Fewer units than that: still the coarsest that repeats, never its pieces.
        None => (ok.iter().copied().min_by(coarser)?, Rule::CoarsestShort),
    };
    Some(Choice {
        index,
        rule,
        units,
        close: ok.len(),
    })
}

/// A first window shorter than this share of the median window, where the trace begins
/// mid-work, is the tail of a unit begun before recording, not a unit.
const PARTIAL_FIRST_SHARE: f64 = 0.5;

/// The events that free memory allocated before the trace began (sorted): the tail of
/// work begun before recording (a wrapped ring buffer, recording started mid-step).
fn begun_before(replay: &Replay) -> Vec<u32> {
    let mut v: Vec<u32> = replay
        .lifetimes
        .iter()
        .filter(|l| l.before_trace())
        .filter_map(|l| l.freed)
        .collect();
    v.sort_unstable();
    v
}

/// Drops a family's first window when it is a unit cut short by where the trace begins:
/// it starts the family only because nothing before it was recorded, it lets go of
/// memory made before the trace, and it is much shorter than the family's other windows
/// ([`PARTIAL_FIRST_SHARE`]). Its events then lie before the first window, as a warm-up's
/// do; counted as a window, the unit's release would read as memory freed where nothing
/// was kept.
fn trim_partial_first(starts: &mut Vec<u32>, events: u32, begun: &[u32]) {
    if starts.len() <= MIN_WINDOWS {
        return;
    }
    let (a, b) = (starts[0], starts[1]);
    let frees_older = begun.partition_point(|&f| f < a) < begun.partition_point(|&f| f < b);
    if !frees_older {
        return;
    }
    let mut lens: Vec<u32> = starts
        .windows(2)
        .skip(1)
        .map(|w| w[1] - w[0])
        .chain(starts.last().map(|&l| events.saturating_sub(l)))
        .collect();
    lens.sort_unstable();
    let median = lens[lens.len() / 2];
    if f64::from(b - a) < PARTIAL_FIRST_SHARE * f64::from(median) {
        starts.remove(0);
    }
}

/// Whether the windows starting at `fine` only cut those starting at `coarse` into
/// pieces: every coarse start is a fine start, and there are at least twice as many.
fn splits(fine: &[u32], coarse: &[u32]) -> bool {
    coarse.len() >= MIN_WINDOWS
        && fine.len() >= 2 * coarse.len()
        && coarse.iter().all(|s| fine.binary_search(s).is_ok())
}

/// Which family won, and by which rule.
struct Choice {
    index: usize,
    rule: Rule,
    /// Families that are units of work.
    units: usize,
    /// Of those, the ones that free nearly as much as the best.
    close: usize,
}

enum Rule {
    /// The coarsest with at least [`EVIDENCE`] windows.
    Coarsest,
    /// None has that many: the coarsest there is (at least [`MIN_WINDOWS`]).
    CoarsestShort,
    /// The coarsest with that many only cuts a coarser unit into pieces (its layers):
    /// the coarser.
    SplitByFiner,
}

fn auto(snap: &Snapshot, replay: &Replay, attr: &Attributor, allocs: &Allocations) -> Windows {
    let device = replay.device;
    let events = snap.trace(device).len() as u32;
    // The sources read the trace independently, and the families are measured
    // independently: both run on every core the pool has (results keep their order).
    let (mut named, metadata) = rayon::join(
        || sources::annotation_families(snap, device, None),
        || sources::metadata_family(snap, device),
    );
    named.extend(metadata);
    // A pipeline schedule's micro-batches are its own marks of its units of work, as
    // annotations are: measured with them.
    named.extend(pipeline::micro_batch_families(snap, device, attr));
    let begun = begun_before(replay);
    for f in &mut named {
        trim_partial_first(&mut f.starts, events, &begun);
    }
    let mut measured: Vec<Measured> = named
        .into_par_iter()
        .map(|f| {
            let mut quality = quality::measure(&f.starts, events, allocs);
            if f.schedule {
                pipeline::excuse(&mut quality);
            }
            // Annotations are the program's own marks of its units of work: what comes
            // before the first (warm-up, graph capture, set-up) is not work it marked, so
            // they need not cover the trace.
            if f.source == WindowSource::Annotation {
                quality
                    .failed
                    .retain(|x| !matches!(x, Failure::LowCoverage { .. }));
            }
            Measured { quality, family: f }
        })
        .collect();
    if let Some(c) = unit_of_work(&measured) {
        return chosen(device, events, measured, c, false);
    }
    let (mut unnamed, sites) = rayon::join(
        || sources::function_families(snap, device, attr),
        || sources::site_families(snap, device),
    );
    unnamed.extend(sites);
    for f in &mut unnamed {
        trim_partial_first(&mut f.starts, events, &begun);
    }
    // Windows already measured (a schedule's micro-batches) are not measured again.
    unnamed.retain(|f| !measured.iter().any(|m| m.family.starts == f.starts));
    let considered = measured.len() + unnamed.len();
    let (passed, spread, refused) = cheap_checks(unnamed, events, allocs);
    // One backward in the whole trace: what repeats inside its pass is its layers. (The
    // program's own annotations are taken at their word.)
    let roles = attr.roles().filter(|m| m.backwards == 1);
    let measure = |families: Vec<Family>| {
        let mut m = shortlist(families, replay, events, allocs);
        for x in &mut m {
            // Layers of one forward keep what they save for its backward, parameters of
            // one optimizer step their new state; whole passes and steps repeated free
            // nearly everything they make.
            if x.quality.self_freed < quality::LAYERS_KEEP_BELOW
                && one_call::one_call(snap, allocs, &x.family.starts).is_some()
            {
                x.quality.failed.push(Failure::OneCall);
            }
        }
        if let Some(roles) = roles {
            for x in &mut m {
                // Inside the one backward: its middle windows start there (layers
                // recomputed by checkpointing); whole forwards repeated before one
                // training step do not. Layers of the forward are `one-pass`.
                let st = &x.family.starts;
                let middle = if st.len() > 2 {
                    &st[1..st.len() - 1]
                } else {
                    &st[..]
                };
                if roles.in_one_backward(middle)
                    && x.quality.self_freed < quality::LAYERS_KEEP_BELOW
                {
                    x.quality.failed.push(Failure::OneBackward);
                }
            }
        }
        m
    };
    measured.extend(measure(passed));
    // Families of unequal lengths pass when their long and short windows do the same
    // work; they are measured only when nothing else is a unit of work.
    if unit_of_work(&measured).is_none() {
        measured.extend(measure(spread));
    }
    let in_full = measured.len();
    measured.extend(refused);
    match unit_of_work(&measured) {
        Some(c) => chosen(device, events, measured, c, true),
        None => {
            let candidates = ranked(&measured);
            let reason = if considered == 0 {
                format!(
                    "nothing repeats in a trace of {} allocation(s): no family of windows to weigh",
                    allocs.births().len()
                )
            } else {
                format!(
                    "none of {considered} candidate window families (annotations, metadata, entries into functions, allocations of call sites; {in_full} measured in full) frees most of what it allocates, repeats alike and covers the trace, as one forward and backward, a single forward or a benchmark's few calls do not"
                )
            };
            whole_trace(device, events, reason, candidates)
        }
    }
}

/// The candidates: those measured in full, most windows first (then the best at freeing
/// in place), then those the cheap checks refused, likewise.
fn ranked(measured: &[Measured]) -> Vec<Candidate> {
    let mut c: Vec<Candidate> = measured.iter().map(Measured::candidate).collect();
    c.sort_by(|a, b| {
        b.quality
            .measured
            .cmp(&a.quality.measured)
            .then(b.quality.windows.cmp(&a.quality.windows))
            .then(b.quality.self_freed.total_cmp(&a.quality.self_freed))
            .then_with(|| a.detail.cmp(&b.detail))
    });
    c
}

fn chosen(device: i64, events: u32, measured: Vec<Measured>, c: Choice, guessed: bool) -> Windows {
    let candidates = ranked(&measured);
    let m = measured.into_iter().nth(c.index);
    let Some(Measured { family, quality }) = m else {
        return whole_trace(device, events, String::new(), candidates);
    };
    let what = match family.source {
        WindowSource::Annotation => format!("annotation family `{}`", family.detail),
        WindowSource::Metadata => "changes of user_metadata".to_string(),
        WindowSource::Frame if family.schedule => format!(
            "entries into `{}`, a pipeline schedule's micro-batches (its warm-up and cool-down hand activations to later windows, so they are not asked to free in place, repeat alike or do the same work)",
            family.detail.trim_start_matches('^').trim_end_matches('$')
        ),
        WindowSource::Frame => format!(
            "entries into `{}`",
            family.detail.trim_start_matches('^').trim_end_matches('$')
        ),
        _ => format!("allocations at {}", family.detail),
    };
    let rule = match c.rule {
        Rule::Coarsest => format!("the coarsest with at least {EVIDENCE} windows"),
        Rule::CoarsestShort => format!("the coarsest (none has {EVIDENCE} windows)"),
        Rule::SplitByFiner => {
            format!("the coarsest; those with {EVIDENCE} windows or more only cut it into pieces")
        }
    };
    let reason = format!(
        "{what}: {} windows; of {} candidates, units of work: {}, of which {} free nearly as much in place as the best: {rule} ({:.0}% of a window's bytes freed in it, {:.0}% of windows alike and {:.0}% doing the same work, {:.0}% of allocations covered)",
        quality.windows,
        candidates.len(),
        c.units,
        c.close,
        quality.self_freed * 100.0,
        quality.alike_windows * 100.0,
        quality.same_work * 100.0,
        quality.coverage * 100.0
    );
    let mut w = build(device, events, family, reason, guessed, quality);
    w.candidates = candidates;
    w
}

/// The function and call-site families worth measuring in full: those that pass the cheap
/// checks (enough windows, alike, covering the trace), one of each set of identical
/// starts, by number of windows (most first); of those with the same number, the ones
/// whose boundaries fall where the least memory is live (where one unit of work ends and
/// the next begins), a few per number and a bounded number in all.
/// The families sorted by the cheap checks: those that pass, those whose lengths spread
/// (measured only when no other family is a unit of work), and those refused, with the
/// figures that refused them (listed among the candidates, never chosen).
fn cheap_checks(
    families: Vec<Family>,
    events: u32,
    allocs: &Allocations,
) -> (Vec<Family>, Vec<Family>, Vec<Measured>) {
    let judged: Vec<(Family, quality::Cheap)> = families
        .into_par_iter()
        .map(|f| {
            let c = quality::cheap(&f.starts, events, allocs);
            (f, c)
        })
        .collect();
    let (mut passed, mut spread, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    for (family, c) in judged {
        match c {
            quality::Cheap::Passes => passed.push(family),
            quality::Cheap::Spread => spread.push(family),
            quality::Cheap::Refused(quality) => refused.push(Measured { quality, family }),
        }
    }
    (passed, spread, refused)
}

fn shortlist(
    families: Vec<Family>,
    replay: &Replay,
    events: u32,
    allocs: &Allocations,
) -> Vec<Measured> {
    let mut plausible = families;
    plausible.sort_by(|a, b| {
        b.starts
            .len()
            .cmp(&a.starts.len())
            .then_with(|| a.starts.cmp(&b.starts))
            .then_with(|| a.detail.cmp(&b.detail))
    });
    plausible.dedup_by(|a, b| a.starts == b.starts);
    let live_before = |f: &Family| -> u128 {
        f.starts
            .iter()
            .map(|&s| replay.requested_after(s.checked_sub(1)) as u128)
            .sum::<u128>()
            / f.starts.len().max(1) as u128
    };
    let mut chosen: Vec<&Family> = Vec::new();
    let mut k = 0;
    while k < plausible.len() && chosen.len() < EVALUATIONS {
        let n = plausible[k].starts.len();
        let end = k + plausible[k..]
            .iter()
            .take_while(|f| f.starts.len() == n)
            .count();
        let mut group: Vec<&Family> = plausible[k..end].iter().collect();
        group.sort_by_key(|f| live_before(f));
        chosen.extend(group.into_iter().take(PER_COUNT));
        k = end;
    }
    chosen
        .into_par_iter()
        .map(|f| Measured {
            quality: quality::measure(&f.starts, events, allocs),
            family: f.clone(),
        })
        .collect()
}
