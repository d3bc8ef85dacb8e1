//! What a frame says about the code that ran: the autograd engine, the optimizer, model
//! set-up, a module's forward, and the three frames that name a tensor outright (a saved
//! variable released, `zero_grad`, gradient accumulation). The patterns are data: one
//! line each, matched against the frame's function name and its file (with `\`
//! read as `/`, so Windows paths match too).

use crate::model::{Frame, FrameId, Snapshot, StackId};

/// A fact a frame establishes, as a bit of [`Marks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Mark {
    /// Backward: the autograd engine or `Tensor.backward`.
    Backward = 1,
    /// The optimizer: `torch/optim`, a framework's optimizer, `zero_grad`.
    Optimizer = 2,
    /// Model set-up: construction, `.to()`/`.cuda()`, state-dict loading, flat parameters.
    Setup = 4,
    /// A module's forward.
    Forward = 8,
    /// A tensor saved for backward is released (`SavedVariable::reset_data`).
    SavedRelease = 16,
    /// `Optimizer.zero_grad` (frees `.grad` tensors).
    ZeroGrad = 32,
    /// Gradient accumulation into `.grad` (`AccumulateGrad`).
    AccumulateGrad = 64,
    /// A buffer that holds gradients by construction: DDP/Megatron gradient buffers, a
    /// pipeline stage's received output gradient.
    GradientBuffer = 128,
    /// A pipeline stage's received input (a P2P receive buffer).
    Received = 256,
}

/// The marks of a stack: an OR of [`Mark`] bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks(pub u16);

impl Marks {
    /// Whether the stack carries `m`.
    pub fn has(self, m: Mark) -> bool {
        self.0 & m as u16 != 0
    }
}

/// How a pattern matches a function name.
#[derive(Clone, Copy, Debug)]
enum Name {
    /// Any name.
    Any,
    /// Exactly this name.
    Is(&'static str),
    /// A name containing this text (C++ names carry their signature).
    Has(&'static str),
}

/// One line of the table: a frame whose file contains `file` (any file when empty) and
/// whose name matches `name` carries `mark`.
struct Pattern {
    mark: Mark,
    file: &'static str,
    name: Name,
}

const fn p(mark: Mark, file: &'static str, name: Name) -> Pattern {
    Pattern { mark, file, name }
}

use Mark::*;
use Name::*;

/// The frame patterns. Sources: PyTorch's `torch/csrc/autograd` (engine, saved
/// variables, `AccumulateGrad`), `torch/optim`, `torch/nn/modules/module.py`, the FSDP and
/// DeepSpeed parameter code, Hugging Face loading; checked against the real corpus's
/// stacks (docs/roles.md lists which file shows which).
const PATTERNS: &[Pattern] = &[
    // The engine thread, with C++ stacks; `VariableType` frames are forward dispatch.
    p(Backward, "", Has("torch::autograd::Engine::")),
    p(Backward, "", Has("PythonEngine::thread_init")),
    p(Backward, "", Has("torch::autograd::Node::operator()")),
    p(Backward, "", Has("Backward0::apply")),
    p(Backward, "", Has("Backward1::apply")),
    // `loss.backward()` / `torch.autograd.backward` / `grad` on the calling thread.
    // `loss.backward()`, `torch.autograd.backward`, and a custom `autograd.Function`'s
    // `backward` (Python frames on the engine's thread): functions named `backward`.
    p(Backward, "", Is("backward")),
    p(Backward, "torch/autograd/__init__.py", Is("grad")),
    p(
        Backward,
        "torch/autograd/graph.py",
        Is("_engine_run_backward"),
    ),
    // Compiled backward (AOT autograd) and checkpoint recomputation run in backward.
    p(Backward, "_aot_autograd/", Is("_backward_impl")),
    p(Backward, "torch/utils/checkpoint.py", Is("unpack_hook")),
    // FSDP's post-backward hooks (reduce-scatter of the gradients) run on the engine's
    // thread with only their own frames.
    p(Backward, "torch/distributed/fsdp/", Has("post_backward")),
    // The optimizer.
    p(Optimizer, "torch/optim/", Any),
    p(Optimizer, "megatron/core/optimizer/", Any),
    p(Optimizer, "deepspeed/ops/adam/", Any),
    p(Optimizer, "apex/optimizers/", Any),
    p(ZeroGrad, "", Is("zero_grad")),
    p(ZeroGrad, "", Has("zero_grad(")),
    // Parameters made: construction, moves, loading, flat parameters.
    p(Setup, "torch/nn/modules/module.py", Is("_apply")),
    p(Setup, "torch/nn/modules/module.py", Is("to_empty")),
    p(Setup, "torch/nn/modules/module.py", Is("load_state_dict")),
    p(
        Setup,
        "torch/nn/modules/module.py",
        Is("_load_from_state_dict"),
    ),
    p(Setup, "torch/nn/modules/", Is("reset_parameters")),
    p(Setup, "torch/nn/modules/", Is("__init__")),
    p(Setup, "torch/nn/init.py", Any),
    p(Setup, "torch/distributed/fsdp/", Has("flat_param")),
    p(Setup, "torch/distributed/fsdp/", Has("flatten")),
    p(Setup, "torch/distributed/fsdp/", Has("unshard")),
    p(Setup, "torch/distributed/fsdp/", Has("all_gather")),
    p(Setup, "torch/distributed/fsdp/", Has("_init_sharded_param")),
    p(Setup, "deepspeed/runtime/zero/partition_parameters.py", Any),
    p(
        Setup,
        "transformers/modeling_utils.py",
        Is("from_pretrained"),
    ),
    p(
        Setup,
        "transformers/modeling_utils.py",
        Has("load_state_dict"),
    ),
    p(
        Setup,
        "accelerate/utils/modeling.py",
        Is("set_module_tensor_to_device"),
    ),
    // A module's forward.
    p(Forward, "torch/nn/modules/module.py", Is("_call_impl")),
    p(
        Forward,
        "torch/nn/modules/module.py",
        Is("_wrapped_call_impl"),
    ),
    p(Forward, "", Is("forward")),
    // Frames that name the tensor.
    p(SavedRelease, "", Has("SavedVariable::reset_data")),
    p(AccumulateGrad, "", Has("AccumulateGrad")),
    p(
        GradientBuffer,
        "megatron/core/distributed/param_and_grad_buffer.py",
        Any,
    ),
    p(
        GradientBuffer,
        "torch/nn/parallel/distributed.py",
        Is("_build_grad_buckets"),
    ),
    p(GradientBuffer, "", Has("Reducer::initialize_buckets")),
    p(
        GradientBuffer,
        "megatron/core/pipeline_parallel/p2p_communication.py",
        Is("create_tensor_recv_next"),
    ),
    p(
        Received,
        "megatron/core/pipeline_parallel/p2p_communication.py",
        Is("create_tensor_recv_prev"),
    ),
];

/// The marks of one frame.
pub(crate) fn frame_marks(snap: &Snapshot, f: &Frame) -> Marks {
    let name = snap.strings.get(f.name);
    let raw = snap.strings.get(f.filename);
    let file = if raw.contains('\\') {
        std::borrow::Cow::Owned(raw.replace('\\', "/"))
    } else {
        std::borrow::Cow::Borrowed(raw)
    };
    let mut m = 0;
    for pat in PATTERNS {
        let name_ok = match pat.name {
            Any => true,
            Is(n) => name == n,
            Has(n) => name.contains(n),
        };
        if name_ok && (pat.file.is_empty() || file.contains(pat.file)) {
            m |= pat.mark as u16;
        }
    }
    Marks(m)
}

/// Marks of every frame, then of stacks on demand (cached by stack id).
pub(crate) struct StackMarks<'s> {
    snap: &'s Snapshot,
    frames: Vec<Marks>,
    /// Per stack id: its marks with the top bit set once computed.
    stacks: Vec<u16>,
}

const DONE: u16 = 0x8000;

impl<'s> StackMarks<'s> {
    pub fn new(snap: &'s Snapshot) -> StackMarks<'s> {
        StackMarks {
            snap,
            frames: snap.frames.iter().map(|f| frame_marks(snap, f)).collect(),
            stacks: vec![0; snap.stacks.len()],
        }
    }

    /// The marks of one frame.
    pub fn frame(&self, f: FrameId) -> Marks {
        self.frames.get(f.index()).copied().unwrap_or_default()
    }

    /// The frames of `stack`, innermost first.
    pub fn frames_of(&self, stack: StackId) -> &'s [FrameId] {
        self.snap.stacks.get(stack)
    }

    /// The OR of the marks of `stack`'s frames.
    pub fn of(&mut self, stack: StackId) -> Marks {
        let i = stack.index();
        if let Some(&m) = self.stacks.get(i)
            && m & DONE != 0
        {
            return Marks(m & !DONE);
        }
        let m = self.snap.stacks.get(stack).iter().fold(0u16, |acc, f| {
            acc | self.frames.get(f.index()).map_or(0, |m| m.0)
        });
        if let Some(slot) = self.stacks.get_mut(i) {
            *slot = m | DONE;
        }
        Marks(m)
    }
}
