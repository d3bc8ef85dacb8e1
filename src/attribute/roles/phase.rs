//! The phase each event of a device's trace runs in (forward, backward, optimizer step,
//! model set-up, other), and the runs of one phase ("spans") that lifetimes are measured
//! against: a tensor made in a forward and freed before that forward ends is scratch, one
//! that outlives it was kept.
//!
//! An event's own stack decides when it says something: an allocation always does (an
//! empty stack on a file whose allocations carry Python frames is the autograd engine's
//! thread, which has none), a free does when the file records the free's own stack (see
//! [`Recorded`]: under `context="alloc"` PyTorch writes the allocation's stack on every
//! free, which says nothing of who let go), and a `free_completed` says what its
//! `free_requested` said (the request is where the program let go; the completion may come
//! later, after other streams, carrying the allocation's stack). The rest (frees
//! recorded without stacks, segment events) take the phase of the last event that said
//! one, when the events around them agree: a free recorded without a stack happens where
//! the program was, between two allocations of one phase; at a boundary between phases it
//! is counted in neither (`Other`), so a free at the end of a backward is not taken for
//! one made by it.

use serde::Serialize;

use crate::model::{Action, EventRange, StackId, Trace};
use crate::replay::{Lifetime, Replay};

use super::marks::{Mark, Marks, StackMarks};

/// Where in a training step an event happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Phase {
    /// Outside the phases below: the training loop, data, communication.
    Other = 0,
    /// A module's forward.
    Forward = 1,
    /// Backward (the autograd engine).
    Backward = 2,
    /// The optimizer step (and `zero_grad`).
    Optimizer = 3,
    /// Model set-up: construction, `.to()`, loading, flat parameters.
    Setup = 4,
}

impl Phase {
    /// The phase of a code `u8`.
    pub(crate) fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Forward,
            2 => Phase::Backward,
            3 => Phase::Optimizer,
            4 => Phase::Setup,
            _ => Phase::Other,
        }
    }

    /// The phase marks say, by precedence: backward, the optimizer, set-up, forward (for
    /// one frame; a stack's phase is its innermost frame's, see `StackMarks::phase`).
    pub fn of(m: Marks) -> Phase {
        if m.has(Mark::Backward) {
            Phase::Backward
        } else if m.has(Mark::Optimizer) || m.has(Mark::ZeroGrad) {
            Phase::Optimizer
        } else if m.has(Mark::Setup) {
            Phase::Setup
        } else if m.has(Mark::Forward) {
            Phase::Forward
        } else {
            Phase::Other
        }
    }
}

/// Annotation names that say a phase (`record_function` ranges: Lightning's
/// `[Strategy]...backward`, `optimizer_step`, a user's `forward`), as lowercase
/// substrings, each with why. A name that matches two lines (Megatron's
/// `forward_backward_func` holds a whole step) says none.
pub const ANNOTATION_PHASES: &[(&[&str], Phase, &str)] = &[
    (
        &["backward"],
        Phase::Backward,
        "a backward pass the code annotated",
    ),
    (
        &["optimizer", "zero_grad", "optim_step"],
        Phase::Optimizer,
        "the optimizer step (and zero_grad)",
    ),
    (
        &["forward"],
        Phase::Forward,
        "a forward pass the code annotated",
    ),
];

/// The phase an annotation's name says (`None`: none, or more than one).
pub fn annotation_phase(name: &str) -> Option<Phase> {
    let lower = name.to_ascii_lowercase();
    let mut said = ANNOTATION_PHASES
        .iter()
        .filter(|(subs, _, _)| subs.iter().any(|s| lower.contains(s)))
        .map(|(_, p, _)| *p);
    match (said.next(), said.next()) {
        (Some(p), None) => Some(p),
        _ => None,
    }
}

/// What the annotations of a device say: the phase of the events inside ranges whose
/// names say one (the innermost decides), and the units of work (the outermost ranges,
/// a step or a request) that lifetimes are measured against.
#[derive(Default)]
pub struct Annotated {
    /// Phase per event from the innermost phase-named range holding it (empty: no
    /// range names a phase).
    phase: Vec<Option<Phase>>,
    /// The outermost closed ranges `[start, end)`, by start, disjoint.
    units: Vec<(u32, u32)>,
    /// Where the outermost range that never closed begins, when one does after a
    /// closed unit (the unit of work the capture cut off).
    open_unit: Option<u32>,
}

impl Annotated {
    /// From `ranges` (as [`crate::model::annotation_event_ranges`] sorts them) of a
    /// trace of `n` events; a range that never closed is no unit of work.
    pub fn of(ranges: &[EventRange<'_>], n: usize) -> Annotated {
        let mut phase: Vec<Option<Phase>> = Vec::new();
        let mut units: Vec<(u32, u32)> = Vec::new();
        let mut outer_end = 0u32;
        let mut open_unit = None;
        for r in ranges {
            let (s, e) = (r.start, r.end);
            // Sorted by start with the longer first: a later range starting before the
            // current outer one ends lies inside it, so it paints over it (innermost last).
            if let Some(p) = annotation_phase(r.name) {
                if phase.is_empty() {
                    phase = vec![None; n];
                }
                for x in &mut phase[(s as usize).min(n)..(e as usize).min(n)] {
                    *x = Some(p);
                }
            }
            if s >= outer_end && e > s {
                if r.closed {
                    units.push((s, e));
                } else if !units.is_empty() && open_unit.is_none() {
                    open_unit = Some(s);
                }
                outer_end = e;
            }
        }
        Annotated {
            phase,
            units,
            open_unit,
        }
    }

    /// The phase the annotations give event `i`.
    pub fn phase(&self, i: usize) -> Option<Phase> {
        self.phase.get(i).copied().flatten()
    }

    /// Whether an allocation made at event `a` and freed at `freed` (`None`: alive at
    /// the end) was made inside a unit of work and was alive after that unit ended.
    pub fn outlived_unit(&self, a: u32, freed: Option<u32>) -> bool {
        let k = self.units.partition_point(|&(s, _)| s <= a);
        k > 0 && {
            let (_, e) = self.units[k - 1];
            a < e && freed.is_none_or(|f| f >= e)
        }
    }

    /// Whether an allocation made at event `a` was made inside the unit of work still
    /// open at the end of the trace.
    pub fn in_open_unit(&self, a: u32) -> bool {
        self.open_unit.is_some_and(|s| a >= s)
    }

    /// Whether any range names a phase.
    pub fn says_phases(&self) -> bool {
        !self.phase.is_empty()
    }
}

/// Of the free events with frames whose allocation carries frames, the share at or above
/// which the file's
/// free stacks are taken for copies of the allocations' (`context="alloc"`, where PyTorch
/// records `context ? context : block->context_when_allocated`): a free of a temporary on
/// the line that made it has its allocation's stack honestly, but not nearly every free.
pub const ALLOC_STACK_COPIES: f64 = 0.9;

/// Fewest such frees for that judgement: on fewer the share says little.
const ALLOC_STACK_COPIES_MIN_FREES: usize = 16;

/// What the stacks of a device's trace can say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Some allocation carries frames (`context` recorded allocations).
    pub alloc_stacks: bool,
    /// Frees carry their own stacks (`context="all"`): some free has frames, and they are
    /// not copies of the allocations' stacks.
    pub free_stacks: bool,
    /// Nearly every free carries its allocation's stack (`context="alloc"`, see
    /// `ALLOC_STACK_COPIES`): free stacks say nothing of who let go, and are not read.
    pub free_stacks_are_allocations: bool,
}

impl Recorded {
    /// The stack that says who let go of `l`: its request's (a late completion may carry
    /// the allocation's), else its completion's; `None` where the file's free stacks are
    /// not the frees' own (none recorded, or copies of the allocations').
    pub fn releaser_stack(&self, l: &Lifetime, trace: &Trace) -> Option<StackId> {
        if !self.free_stacks {
            return None;
        }
        l.free_requested
            .and_then(|r| trace.stack.get(r as usize).copied())
            .or_else(|| l.free_stack(trace))
    }

    /// What `trace` records; `replay` (its replay) pairs each free with its allocation.
    pub fn of(trace: &Trace, replay: &Replay) -> Recorded {
        let mut r = Recorded {
            alloc_stacks: false,
            free_stacks: false,
            free_stacks_are_allocations: false,
        };
        for (a, s) in trace.action.iter().zip(&trace.stack) {
            if *s == StackId::EMPTY {
                continue;
            }
            if *a == Action::ALLOC {
                r.alloc_stacks = true;
            } else if a.frees() || *a == Action::FREE_REQUESTED {
                r.free_stacks = true;
            }
            if r.alloc_stacks && r.free_stacks {
                break;
            }
        }
        if r.free_stacks {
            // Per kind of free event (request, completion), of those with frames whose
            // allocation has frames: how many, and how many carry the allocation's stack.
            // The requests decide where they have frames (a completion may carry the
            // allocation's stack when it comes late); else the completions.
            let (mut req, mut done) = ((0usize, 0usize), (0usize, 0usize));
            for l in &replay.lifetimes {
                if l.traced_birth().is_none() || l.stack == StackId::EMPTY {
                    continue;
                }
                for f in [l.free_requested, l.freed].into_iter().flatten() {
                    let f = f as usize;
                    let (Some(&a), Some(&s)) = (trace.action.get(f), trace.stack.get(f)) else {
                        continue;
                    };
                    let count = if a == Action::FREE_REQUESTED {
                        &mut req
                    } else if a.frees() {
                        &mut done
                    } else {
                        continue;
                    };
                    if s != StackId::EMPTY {
                        count.0 += 1;
                        count.1 += usize::from(s == l.stack);
                    }
                }
            }
            let (frees, copies) = if req.0 >= ALLOC_STACK_COPIES_MIN_FREES {
                req
            } else {
                done
            };
            if frees >= ALLOC_STACK_COPIES_MIN_FREES
                && copies as f64 >= ALLOC_STACK_COPIES * frees as f64
            {
                r.free_stacks = false;
                r.free_stacks_are_allocations = true;
            }
        }
        r
    }
}

/// The phase of every event and the span (run of one phase) it belongs to.
pub struct Phases {
    /// Phase per event.
    pub phase: Vec<Phase>,
    /// Span number per event: it grows by one where the phase changes.
    pub span: Vec<u32>,
    /// The first event of each backward span, ascending.
    pub backward_starts: Vec<u32>,
    /// Backward spans holding an allocation: the backward passes (a free on its own with
    /// no Python frame, a C++ destructor's on the main thread, is not one).
    pub backward_passes: usize,
    /// The first event of each run of forward events, ascending.
    pub forward_starts: Vec<u32>,
    /// The first event of each span of a phase other than `Other`, ascending.
    pub phase_starts: Vec<u32>,
    /// Per span: whether it began with a forward (its pass includes the code after it).
    pub span_is_forward: Vec<bool>,
    /// Per span: whether something other than a lone stackless free says it is a
    /// backward (an allocation, or a free whose stack names the engine). A run of frees
    /// without Python frames and no allocation between them is a thread letting go of
    /// memory (a graph dropped on the engine's thread, a destructor), not a backward
    /// pass: it neither cuts a release nor makes what it frees "freed in backward".
    pub span_is_pass: Vec<bool>,
    /// The first event in a forward or backward (`None`: the trace has neither).
    pub first_work: Option<u32>,
    /// What the trace's stacks record.
    pub recorded: Recorded,
    /// What its annotations say.
    pub annotated: Annotated,
}

impl Phases {
    /// The phases of `trace`'s events, marks read through `marks`.
    /// `annotated` says what the device's `record_function` ranges add: an event whose
    /// stack says no phase (or none is recorded) takes the phase of the innermost
    /// phase-named range holding it.
    pub(crate) fn of(
        trace: &Trace,
        replay: &Replay,
        marks: &mut StackMarks,
        annotated: Annotated,
    ) -> Phases {
        let recorded = Recorded::of(trace, replay);
        let n = trace.len();
        // Per stack id: its phase once computed (`u8::MAX`: not yet).
        let mut cache: Vec<u8> = Vec::new();
        let mut said = |i: usize, marks: &mut StackMarks| -> Option<Phase> {
            if is_workspace(trace, i) {
                return None;
            }
            let a = trace.action[i];
            let s = trace.stack[i];
            let is_free = a.frees() || a == Action::FREE_REQUESTED;
            let is_segment = a == Action::SEGMENT_ALLOC || a == Action::SEGMENT_FREE;
            let from_stack =
                if a == Action::ALLOC && recorded.alloc_stacks || is_free && recorded.free_stacks {
                    // Without Python frames: the engine's thread (C++ stacks name it).
                    if s == StackId::EMPTY {
                        Some(Phase::Backward)
                    } else {
                        Some(stack_phase(s, marks, &mut cache))
                    }
                } else if is_segment && recorded.alloc_stacks && s != StackId::EMPTY {
                    // A segment event carries the stack of the code that caused it
                    // (`empty_cache` between two passes is in neither).
                    Some(stack_phase(s, marks, &mut cache))
                } else {
                    None
                };
            match from_stack {
                Some(p) if p != Phase::Other => Some(p),
                // Without allocation stacks the annotations are all there is: outside
                // their phase ranges is the loop's own code.
                None if !recorded.alloc_stacks && annotated.says_phases() => {
                    Some(annotated.phase(i).unwrap_or(Phase::Other))
                }
                other => annotated.phase(i).or(other),
            }
        };
        let mut said: Vec<Option<Phase>> = (0..n).map(|i| said(i, marks)).collect();
        // A completion says what its request said.
        for l in &replay.lifetimes {
            let (Some(r), Some(f)) = (l.free_requested, l.freed) else {
                continue;
            };
            let (r, f) = (r as usize, f as usize);
            if r < f && f < n && trace.action[f].frees() {
                said[f] = said[r];
            }
        }
        // The next event that said a phase, from each event on.
        let mut next: Vec<Option<Phase>> = vec![None; n + 1];
        for i in (0..n).rev() {
            next[i] = said[i].or(next[i + 1]);
        }
        let mut phase = Vec::with_capacity(n);
        let mut prev: Option<Phase> = None;
        for i in 0..n {
            let p = match (said[i], prev, next[i]) {
                (Some(p), _, _) => p,
                // Between two events of one phase: that phase. At a boundary the event
                // could belong to either side, so to neither.
                (None, Some(a), Some(b)) if a == b => a,
                (None, Some(_), Some(_)) => Phase::Other,
                (None, Some(a), None) | (None, None, Some(a)) => a,
                (None, None, None) => Phase::Other,
            };
            if said[i].is_some() {
                prev = said[i];
            }
            phase.push(p);
        }
        // The phase spans are cut by: a run of set-up events inside a pass (FSDP's
        // unshard from a backward hook: all-gather frames only) is that pass's, so it
        // neither ends the pass nor begins another; the events keep their own phase.
        let pass = in_pass_phases(&phase);
        let mut span = Vec::with_capacity(n);
        let mut backward_starts = Vec::new();
        let mut backward_passes = 0;
        let mut allocated = false;
        let mut forward_starts = Vec::new();
        let mut phase_starts = Vec::new();
        let mut s = 0u32;
        let mut began = pass.first().copied().unwrap_or(Phase::Other);
        let mut span_is_forward = vec![began == Phase::Forward];
        let mut span_is_pass = vec![false];
        for i in 0..n {
            // A forward and the code right after it (the loss, the logits processor, the
            // schedule's bookkeeping) are one pass: the span goes on until another phase
            // begins.
            // A free in forward code after that code (a forward's scratch released late)
            // is still that pass: only an allocation begins the next forward.
            let a = trace.action[i];
            let same_pass = began == Phase::Forward
                && (pass[i] == Phase::Other
                    || pass[i] == Phase::Forward && (a.frees() || a == Action::FREE_REQUESTED));
            if i > 0 && pass[i] != pass[i - 1] && !same_pass {
                s += 1;
                began = pass[i];
                span_is_forward.push(began == Phase::Forward);
                span_is_pass.push(false);
                if began != Phase::Other {
                    phase_starts.push(i as u32);
                }
            }
            if pass[i] == Phase::Backward && (i == 0 || pass[i - 1] != Phase::Backward) {
                backward_starts.push(i as u32);
                allocated = false;
            }
            if pass[i] == Phase::Backward && a == Action::ALLOC && !allocated {
                allocated = true;
                backward_passes += 1;
            }
            if pass[i] == Phase::Forward && (i == 0 || pass[i - 1] != Phase::Forward) {
                forward_starts.push(i as u32);
            }
            // A completion's stack is no evidence: it says what its request said.
            if pass[i] != Phase::Backward
                || a == Action::ALLOC
                || (trace.stack[i] != StackId::EMPTY && !a.frees())
            {
                if let Some(x) = span_is_pass.last_mut() {
                    *x = true;
                }
            }
            span.push(s);
        }
        let first_work = phase
            .iter()
            .position(|p| matches!(p, Phase::Forward | Phase::Backward))
            .map(|i| i as u32);
        Phases {
            phase,
            span,
            backward_starts,
            backward_passes,
            forward_starts,
            phase_starts,
            first_work,
            span_is_forward,
            span_is_pass,
            recorded,
            annotated,
        }
    }

    /// Whether event `a` is the code right after a forward, in that forward's pass.
    pub fn in_forward_pass(&self, a: u32) -> bool {
        let i = a as usize;
        self.phase.get(i) == Some(&Phase::Other)
            && self
                .span
                .get(i)
                .and_then(|&s| self.span_is_forward.get(s as usize))
                .copied()
                .unwrap_or(false)
    }

    /// Whether a backward begins after event `a` and at or before event `end` (`None`:
    /// the end of the trace).
    pub fn backward_between(&self, a: u32, end: Option<u32>) -> bool {
        starts_between(&self.backward_starts, a, end)
    }

    /// Whether a span of some phase (not `Other`) begins after event `a` and at or
    /// before event `end`.
    pub fn phase_between(&self, a: u32, end: Option<u32>) -> bool {
        starts_between(&self.phase_starts, a, end)
    }

    /// Whether a forward begins after event `a` and at or before event `end`.
    pub fn forward_between(&self, a: u32, end: Option<u32>) -> bool {
        starts_between(&self.forward_starts, a, end)
    }
}

/// The phase `stack` runs in: backward when any frame is the engine's (a forward
/// recomputed in backward, a closure's backward inside `optimizer.step`, belong to
/// backward); else the innermost frame that says a phase (Lightning runs the forward
/// inside `optimizer.step(closure)`: the forward is what allocates).
fn stack_phase(stack: StackId, marks: &StackMarks, cache: &mut Vec<u8>) -> Phase {
    let i = stack.index();
    if let Some(&p) = cache.get(i)
        && p != u8::MAX
    {
        return Phase::from_u8(p);
    }
    let frames = marks.frames_of(stack);
    let p = if frames.iter().any(|&f| marks.frame(f).has(Mark::Backward)) {
        Phase::Backward
    } else {
        frames
            .iter()
            .map(|&f| Phase::of(marks.frame(f)))
            .find(|p| *p != Phase::Other)
            .unwrap_or(Phase::Other)
    };
    if cache.len() <= i {
        cache.resize(i + 1, u8::MAX);
    }
    cache[i] = p as u8;
    p
}

/// Each event's phase for cutting spans: a run of `Setup` events between events of one
/// pass (forward or backward) takes that pass's phase.
fn in_pass_phases(phase: &[Phase]) -> Vec<Phase> {
    let mut out = phase.to_vec();
    let mut i = 0;
    while i < phase.len() {
        if phase[i] != Phase::Setup {
            i += 1;
            continue;
        }
        let j = phase[i..]
            .iter()
            .position(|p| *p != Phase::Setup)
            .map_or(phase.len(), |k| i + k);
        let before = i.checked_sub(1).map(|k| phase[k]);
        let after = phase.get(j).copied();
        if let (Some(b), Some(a)) = (before, after)
            && a == b
            && matches!(a, Phase::Forward | Phase::Backward)
        {
            out[i..j].fill(a);
        }
        i = j;
    }
    out
}

fn starts_between(starts: &[u32], a: u32, end: Option<u32>) -> bool {
    let k = starts.partition_point(|&s| s <= a);
    starts.get(k).is_some_and(|&s| end.is_none_or(|e| s <= e))
}

/// Whether event `i` is the `alloc` of a torch_npu workspace block: the snapshot puts a
/// `workspace_snapshot`, `segment_alloc`, `alloc` triple for each live one before the
/// trace, out of time order, so it says nothing about phases.
pub fn is_workspace(trace: &Trace, i: usize) -> bool {
    i >= 2
        && trace.action[i] == Action::ALLOC
        && trace.action[i - 2] == Action::WORKSPACE_SNAPSHOT
        && trace.addr[i - 2] == trace.addr[i]
}
