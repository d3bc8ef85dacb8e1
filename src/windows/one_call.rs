//! One call cut into its parts: a trace that holds a single forward pass (a benchmark's
//! forward with autograd on, no backward after it) repeats only its layers, each keeping
//! what it saves for the backward that never comes; a ring buffer that kept only an
//! optimizer step repeats its parameters, each getting its state on the first step. Those
//! windows are parts of one call, not units of work, and what they keep is no leak. The
//! stacks show it: every allocation from the first window to the end of the trace runs
//! inside one module's `forward` (the loop over the layers) or one optimizer's `step`
//! (the loop over the parameters), under which every window starts.

use crate::attribute::is_python;
use crate::model::{Snapshot, StackId, StrId};

use super::quality::Allocations;

/// Whether a frame is of a function one call of which a trace can hold whole, with the
/// repetitions inside it its parts: a module's `forward` (`nn.Module.forward`: its layers)
/// or an optimizer's `step` (a `step` in a file whose path names an optimizer: `torch/optim`,
/// `optimizer.py`, `fused_adam.py`; a training loop's `step` in `train.py` is not one).
fn container(name: &str, file: &str) -> bool {
    name == "forward" || (name == "step" && file.contains("optim"))
}

/// Allocations whose stacks are read (evenly sampled from the first window's start on, and
/// the last one, where work after the call would be): one outside the call is enough to
/// say the trace holds more than it.
const SAMPLE: usize = 4096;

/// Window starts whose stacks are read (evenly sampled).
const STARTS: usize = 16;

/// A function by its file and name.
type Function = (StrId, StrId);

/// The function ([`container`]: its file and name) inside which every allocation from the
/// first window's start to the end of the trace runs, and under which every window
/// starts: the windows are parts of one call of it (`None`: not so).
pub fn one_call(snap: &Snapshot, allocs: &Allocations, starts: &[u32]) -> Option<Function> {
    let births = allocs.births();
    let start = *starts.first()?;
    let first = births.partition_point(|&b| b < start);
    if first >= births.len() {
        return None;
    }
    let calls = |i: usize| -> Vec<Function> {
        let stack = StackId(allocs.stack(i));
        let mut f: Vec<Function> = snap
            .stacks
            .get(stack)
            .iter()
            .map(|&id| snap.frames.get(id))
            .filter(|f| {
                container(snap.strings.get(f.name), snap.strings.get(f.filename))
                    && is_python(snap, f)
            })
            .map(|f| (f.filename, f.name))
            .collect();
        f.sort_unstable();
        f.dedup();
        f
    };
    let mut common = calls(first);
    let step = starts.len().div_ceil(STARTS).max(1);
    let at_starts = starts
        .iter()
        .step_by(step)
        .map(|&s| births.partition_point(|&b| b < s))
        .filter(|&i| i < births.len());
    let rest = births.len() - first;
    let sampled = (0..rest.min(SAMPLE)).map(|k| first + k * rest / rest.min(SAMPLE));
    for i in at_starts.chain(sampled).chain([births.len() - 1]) {
        if common.is_empty() {
            return None;
        }
        let here = calls(i);
        common.retain(|f| here.binary_search(f).is_ok());
    }
    common.first().copied()
}
