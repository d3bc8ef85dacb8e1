//! One forward cut into its layers: a trace that holds a single forward pass (a benchmark's
//! forward with autograd on, no backward after it) repeats only its layers, and each layer
//! keeps what it saves for the backward that never comes. Those windows are parts of one
//! call, not units of work, and what they keep is no leak. The stacks show it: every
//! allocation from the first window to the end of the trace runs inside one module's
//! `forward` (the loop over the layers), which every window starts under.

use crate::attribute::is_python;
use crate::model::{Snapshot, StackId, StrId};

use super::quality::Allocations;

/// The name of a module's forward (`nn.Module.forward`).
const FORWARD: &str = "forward";

/// Allocations whose stacks are read (evenly sampled from the first window's start on):
/// one outside the forward is enough to say the trace holds more than the pass.
const SAMPLE: usize = 4096;

/// Window starts whose stacks are read (evenly sampled).
const STARTS: usize = 16;

/// A function by its file and name.
type Function = (StrId, StrId);

/// The forward (its file and function name) inside which every allocation from the first
/// window's start to the end of the trace runs, and under which every window starts:
/// the windows are the layers of one call of it (`None`: not so).
pub fn one_forward(snap: &Snapshot, allocs: &Allocations, starts: &[u32]) -> Option<Function> {
    let births = allocs.births();
    let start = *starts.first()?;
    let first = births.partition_point(|&b| b < start);
    if first >= births.len() {
        return None;
    }
    let forwards = |i: usize| -> Vec<Function> {
        let stack = StackId(allocs.stack(i));
        let mut f: Vec<Function> = snap
            .stacks
            .get(stack)
            .iter()
            .map(|&id| snap.frames.get(id))
            .filter(|f| snap.strings.get(f.name) == FORWARD && is_python(snap, f))
            .map(|f| (f.filename, f.name))
            .collect();
        f.sort_unstable();
        f.dedup();
        f
    };
    let mut common = forwards(first);
    let step = starts.len().div_ceil(STARTS).max(1);
    let at_starts = starts
        .iter()
        .step_by(step)
        .map(|&s| births.partition_point(|&b| b < s))
        .filter(|&i| i < births.len());
    let rest = births.len() - first;
    let sampled = (0..rest.min(SAMPLE)).map(|k| first + k * rest / rest.min(SAMPLE));
    for i in at_starts.chain(sampled) {
        if common.is_empty() {
            return None;
        }
        let here = forwards(i);
        common.retain(|f| here.binary_search(f).is_ok());
    }
    common.first().copied()
}
