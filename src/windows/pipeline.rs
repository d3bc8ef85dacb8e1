//! A pipeline stage's micro-batches. A 1F1B schedule runs a few forwards on a stage before
//! its first backward (warm-up) and a few backwards after its last forward (cool-down), so
//! on every stage but the last a micro-batch's window hands its activations to a later
//! window, and a short mini-batch is mostly warm-up and cool-down: its windows neither
//! free what they allocate, nor repeat alike, nor do the same work, yet they are the units
//! growth is counted in (a leak kept per micro-batch grows in each). The schedules mark
//! them themselves, as annotations do: each calls one function per micro-batch.

use regex::Regex;

use crate::attribute::Attributor;
use crate::model::fxhash::FastMap;
use crate::model::{Action, Frame, FrameId, Snapshot, StackId, StrId};

use super::quality::{EVIDENCE, Failure, Quality};
use super::sources::{Family, frame_family};

/// A pipeline schedule, as its frames show it.
struct Schedule {
    /// The function it calls once per micro-batch.
    function: &'static str,
    /// The end of the path of the file that defines it: only a frame of that file counts,
    /// so a training loop's own `forward_step` is not taken for a schedule's.
    file: &'static str,
    /// The end of the path of the file whose calls receive a micro-batch's input from the
    /// previous stage, just before its forward (`None`: no such allocation to look for).
    receive: Option<&'static str>,
}

/// The schedules known.
const SCHEDULES: [Schedule; 3] = [
    // Megatron-core's schedules (under NeMo and verl's Megatron engine too): the input
    // arrives in `recv_forward` or `send_backward_recv_forward` before `forward_step`.
    Schedule {
        function: "forward_step",
        file: "megatron/core/pipeline_parallel/schedules.py",
        receive: Some("megatron/core/pipeline_parallel/p2p_communication.py"),
    },
    // DeepSpeed's pipeline engine (its receive buffers are allocated once and reused).
    Schedule {
        function: "_exec_forward_pass",
        file: "deepspeed/runtime/pipe/engine.py",
        receive: None,
    },
    // torch.distributed.pipelining.
    Schedule {
        function: "forward_one_chunk",
        file: "torch/distributed/pipelining/stage.py",
        receive: None,
    },
];

/// The `--windows` value of a schedule's micro-batches.
pub const SPEC: &str = "pipeline";

/// Whether the path of `file` ends with `end` (`/` or `\\` between its parts).
fn file_ends_with(snap: &Snapshot, file: StrId, end: &str) -> bool {
    snap.strings.get(file).replace('\\', "/").ends_with(end)
}

impl Schedule {
    /// Whether `frame` is this schedule's per-micro-batch function, in its own file.
    fn is(&self, snap: &Snapshot, frame: &Frame) -> bool {
        snap.strings.get(frame.name) == self.function
            && file_ends_with(snap, frame.filename, self.file)
    }
}

/// Moves each window's start back over the allocations just before it that receive its
/// input (each with a frame of `receive`; frees between them are passed over): the input
/// belongs to the micro-batch that reads it, and is held (or leaked) with it.
fn with_inputs(snap: &Snapshot, device: i64, starts: &mut [u32], receive: &str) {
    let trace = snap.trace(device);
    let mut receives: Vec<Option<bool>> = vec![None; snap.stacks.len()];
    let mut is_receive = |stack: StackId| -> bool {
        let Some(slot) = receives.get_mut(stack.0 as usize) else {
            return false;
        };
        *slot.get_or_insert_with(|| {
            snap.stacks
                .get(stack)
                .iter()
                .any(|&f| file_ends_with(snap, snap.frames.get(f).filename, receive))
        })
    };
    let mut floor = 0;
    for start in starts.iter_mut() {
        let entry = *start;
        let mut i = entry;
        while i > floor {
            let e = (i - 1) as usize;
            if trace.action.get(e) == Some(&Action::ALLOC) {
                if !trace.stack.get(e).is_some_and(|&s| is_receive(s)) {
                    break;
                }
                *start = i - 1;
            }
            i -= 1;
        }
        floor = entry + 1;
    }
}

/// An allocation under a schedule's frame: its event, and the key of its stack up to
/// that frame.
#[derive(Clone, Copy)]
struct Call {
    event: u32,
    key: u32,
}

/// The most frequent of `keys` (the least on a tie).
fn most_common(keys: impl Iterator<Item = u32>) -> Option<u32> {
    let mut count: FastMap<u32, usize> = FastMap::default();
    for k in keys {
        *count.entry(k).or_default() += 1;
    }
    count
        .into_iter()
        .max_by_key(|&(k, n)| (n, std::cmp::Reverse(k)))
        .map(|(k, _)| k)
}

/// Splits windows where one call of the schedule's function follows another with no
/// allocation between (the first stage's warm-up forwards: nothing is received), so that
/// their entries merged into one window.
///
/// A call is known by its allocations' stacks up to the schedule's frame: the one that
/// opens most windows (`open`) and the one that closes most (`close`). Inside a window,
/// `open` right after `close` (no other allocation under the schedule's frame between) is
/// taken for a new call only when the calls so counted are the backward passes the trace
/// shows (one each, give or take the one the trace's ends may cut): a loop's body (a
/// layer) may also end and start with them, and then the count is several times over.
fn split_merged(
    snap: &Snapshot,
    device: i64,
    schedule: &Schedule,
    backwards: usize,
    starts: &mut Vec<u32>,
) {
    let trace = snap.trace(device);
    let Some(&first) = starts.first() else {
        return;
    };
    // The key of each stack: its frames up to the schedule's (None: not under it).
    let mut keys: FastMap<&[FrameId], u32> = FastMap::default();
    let mut key_of: Vec<Option<Option<u32>>> = vec![None; snap.stacks.len()];
    let mut key = |stack: StackId| -> Option<u32> {
        let slot = key_of.get_mut(stack.0 as usize)?;
        *slot.get_or_insert_with(|| {
            let frames = snap.stacks.get(stack);
            let at = frames
                .iter()
                .position(|&f| schedule.is(snap, snap.frames.get(f)))?;
            let n = keys.len() as u32;
            Some(*keys.entry(&frames[..=at]).or_insert(n))
        })
    };
    // Each window's allocations under the schedule's frame.
    let mut windows: Vec<Vec<Call>> = vec![Vec::new(); starts.len()];
    let mut w = 0;
    for e in first as usize..trace.len() {
        while starts.get(w + 1).is_some_and(|&s| s as usize <= e) {
            w += 1;
        }
        if trace.action.get(e) != Some(&Action::ALLOC) {
            continue;
        }
        if let (Some(k), Some(calls)) =
            (trace.stack.get(e).and_then(|&s| key(s)), windows.get_mut(w))
        {
            calls.push(Call {
                event: e as u32,
                key: k,
            });
        }
    }
    let open = most_common(windows.iter().filter_map(|w| w.first()).map(|c| c.key));
    let close = most_common(windows.iter().filter_map(|w| w.last()).map(|c| c.key));
    let (Some(open), Some(close)) = (open, close) else {
        return;
    };
    let inner = |w: &[Call]| -> Vec<u32> {
        w.windows(2)
            .filter(|p| p[0].key == close && p[1].key == open)
            .map(|p| p[1].event)
            .collect()
    };
    let more: Vec<u32> = windows.iter().flat_map(|w| inner(w)).collect();
    if !more.is_empty() && (starts.len() + more.len()).abs_diff(backwards) <= 1 {
        starts.extend(more);
        starts.sort_unstable();
        starts.dedup();
    }
}

/// Splits windows where the schedule freed memory between two calls of its function.
/// A requested free's stack is where the program was when it let go of the memory
/// (PyTorch records it with the default `context="all"`; a completed free may come later,
/// when the allocator gets to it, so it is not read): one with a frame of the schedule's
/// file but not the function was made by the schedule between calls (the first stage's
/// sent output, dropped before the next forward), so the next allocation under the
/// function starts a call, though no allocation came between. Frees without such a frame
/// (the autograd engine's, another thread's) say nothing.
fn split_at_schedule_frees(
    snap: &Snapshot,
    device: i64,
    schedule: &Schedule,
    starts: &mut Vec<u32>,
) {
    let trace = snap.trace(device);
    // Per stack: under the function (true), in the schedule's file outside it (false).
    let mut place: Vec<Option<Option<bool>>> = vec![None; snap.stacks.len()];
    let mut place_of = |stack: StackId| -> Option<bool> {
        let slot = place.get_mut(stack.0 as usize)?;
        *slot.get_or_insert_with(|| {
            let frames = snap.stacks.get(stack).iter().map(|&f| snap.frames.get(f));
            let mut in_file = false;
            for f in frames {
                if schedule.is(snap, f) {
                    return Some(true);
                }
                in_file |= file_ends_with(snap, f.filename, schedule.file);
            }
            in_file.then_some(false)
        })
    };
    let mut between = false;
    let mut more = Vec::new();
    for (e, (&action, &stack)) in trace.action.iter().zip(trace.stack.iter()).enumerate() {
        match (action, place_of(stack)) {
            (Action::ALLOC, Some(true)) if between => {
                between = false;
                more.push(e as u32);
            }
            (Action::ALLOC, Some(_)) => between = false,
            (Action::FREE_REQUESTED, Some(false)) => between = true,
            _ => {}
        }
    }
    if !more.is_empty() {
        starts.extend(more);
        starts.sort_unstable();
        starts.dedup();
    }
}

/// The micro-batches of each pipeline schedule whose per-micro-batch function the trace's
/// frames hold: a window starts at each entry into it (or at the next call, where calls
/// follow each other with no allocation between: after the schedule's own free, or where
/// the allocations' stacks show it), or at the receive of its input just before.
pub(super) fn micro_batch_families(snap: &Snapshot, device: i64, attr: &Attributor) -> Vec<Family> {
    SCHEDULES
        .iter()
        .filter(|s| snap.frames.iter().any(|f| s.is(snap, f)))
        .filter_map(|s| {
            let re = Regex::new(&format!("^{}$", regex::escape(s.function))).ok()?;
            let mut f = frame_family(snap, device, attr, &re).of_schedule(SPEC);
            split_at_schedule_frees(snap, device, s, &mut f.starts);
            let backwards = attr.roles().map_or(0, |m| m.backwards);
            split_merged(snap, device, s, backwards, &mut f.starts);
            if let Some(receive) = s.receive {
                with_inputs(snap, device, &mut f.starts, receive);
            }
            Some(f)
        })
        .collect()
}

/// Excuses what a schedule's warm-up and cool-down explain in its micro-batches' quality:
/// memory handed to a later window (not cleaning up, one pass), windows of forwards only
/// or backwards only (not alike, not the same work). Only with enough windows to judge
/// growth on ([`EVIDENCE`]): where one forward follows another with no allocation between
/// (the first stage's warm-up) and the calls cannot be told apart (a forward-only run: no
/// backward passes to count them by), entries merge, and a few merged windows are not
/// micro-batches.
pub(super) fn excuse(quality: &mut Quality) {
    if (quality.windows as usize) < EVIDENCE {
        return;
    }
    quality.failed.retain(|f| {
        !matches!(
            f,
            Failure::NotCleaningUp { .. }
                | Failure::NotAlike { .. }
                | Failure::NotSameWork { .. }
                | Failure::OnePass { .. }
        )
    });
}
