//! The phase each event of a device's trace runs in (forward, backward, optimizer step,
//! model set-up, other), and the runs of one phase ("spans") that lifetimes are measured
//! against: a tensor made in a forward and freed before that forward ends is scratch, one
//! that outlives it was kept.
//!
//! An event's own stack decides when it says something: an allocation always does (an
//! empty stack on a file whose allocations carry Python frames is the autograd engine's
//! thread, which has none), a free does when the file records free stacks. The rest (frees
//! recorded without stacks, segment events) take the phase of the last event that said
//! one, when the events around them agree: a free recorded without a stack happens where
//! the program was, between two allocations of one phase; at a boundary between phases it
//! is counted in neither (`Other`), so a free at the end of a backward is not taken for
//! one made by it.

use serde::Serialize;

use crate::model::{Action, StackId, Trace};

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

/// What the stacks of a device's trace can say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Some allocation carries frames (`context` recorded allocations).
    pub alloc_stacks: bool,
    /// Some free carries frames (`context="all"`).
    pub free_stacks: bool,
}

impl Recorded {
    /// What `trace` records.
    pub fn of(trace: &Trace) -> Recorded {
        let mut r = Recorded {
            alloc_stacks: false,
            free_stacks: false,
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
    /// The first event of each run of forward events, ascending.
    pub forward_starts: Vec<u32>,
    /// The first event in a forward or backward (`None`: the trace has neither).
    pub first_work: Option<u32>,
    /// What the trace's stacks record.
    pub recorded: Recorded,
}

impl Phases {
    /// The phases of `trace`'s events, marks read through `marks`.
    pub(crate) fn of(trace: &Trace, marks: &mut StackMarks) -> Phases {
        let recorded = Recorded::of(trace);
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
            if a == Action::ALLOC && recorded.alloc_stacks || is_free && recorded.free_stacks {
                // Without Python frames: the engine's thread (C++ stacks name it).
                if s == StackId::EMPTY {
                    return Some(Phase::Backward);
                }
                return Some(stack_phase(s, marks, &mut cache));
            }
            None
        };
        let said: Vec<Option<Phase>> = (0..n).map(|i| said(i, marks)).collect();
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
        let mut span = Vec::with_capacity(n);
        let mut backward_starts = Vec::new();
        let mut forward_starts = Vec::new();
        let mut s = 0u32;
        let mut began = phase.first().copied().unwrap_or(Phase::Other);
        for i in 0..n {
            // A forward and the code right after it (the loss, the logits processor, the
            // schedule's bookkeeping) are one pass: the span goes on until another phase
            // begins.
            // A free in forward code after that code (a forward's scratch released late)
            // is still that pass: only an allocation begins the next forward.
            let same_pass = began == Phase::Forward
                && (phase[i] == Phase::Other
                    || phase[i] == Phase::Forward && trace.action[i] != Action::ALLOC);
            if i > 0 && phase[i] != phase[i - 1] && !same_pass {
                s += 1;
                began = phase[i];
            }
            if phase[i] == Phase::Backward && (i == 0 || phase[i - 1] != Phase::Backward) {
                backward_starts.push(i as u32);
            }
            if phase[i] == Phase::Forward && (i == 0 || phase[i - 1] != Phase::Forward) {
                forward_starts.push(i as u32);
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
            forward_starts,
            first_work,
            recorded,
        }
    }

    /// Whether a backward begins after event `a` and at or before event `end` (`None`:
    /// the end of the trace).
    pub fn backward_between(&self, a: u32, end: Option<u32>) -> bool {
        starts_between(&self.backward_starts, a, end)
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
