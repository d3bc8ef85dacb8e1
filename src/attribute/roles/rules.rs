//! The built-in role rules, as data: each says when it applies (what the allocation's
//! stack, its freeing stack and its lifetime show) and which role it gives; the first
//! that applies decides. docs/roles.md explains each with its evidence and limits.

use super::Role;
use super::marks::Mark;
use super::phase::Phase;

/// How an allocation's life relates to the phase it was made in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Freed before that phase's span ended.
    InPhase,
    /// Not freed within it (freed later, or alive at the end).
    BeyondPhase,
    /// Freed before another phase began: within its own, or in the code right after it
    /// (a backward's seed gradient, freed as `backward()` returns). Never freed is not.
    UntilNextPhase,
    /// Alive when another phase began after its own, or alive at the end.
    PastNextPhase,
    /// Freed later, in a backward.
    FreedInBackward,
    /// Alive when a later backward began (freed after it began, or never).
    AcrossBackward,
    /// Never freed, and made before any forward or backward ran.
    FromStart,
    /// Alive when a later forward began: an input of it.
    AcrossForward,
    /// Made inside an annotated unit of work (the outermost `record_function` range: a
    /// step, a request) and alive after it ended.
    OutlivedUnit,
    /// Made inside the unit of work still running when the trace ends (its range never
    /// closed, after closed ones) and alive at the end.
    InOpenUnit,
    /// Made in the code right after a forward (its pass: the loss, log-probs, sampling)
    /// and not freed within that pass.
    PastItsPass,
}

/// How many [`Kept`] facts there are.
pub const KEPT_FACTS: usize = Kept::PastItsPass as usize + 1;

/// When a rule applies: every condition given holds.
#[derive(Clone, Copy, Debug)]
pub struct When {
    /// The allocation has its `alloc` event in the trace (or not).
    pub traced: Option<bool>,
    /// The device's allocations carry stacks (or not).
    pub stacks: Option<bool>,
    /// The allocation is a torch_npu workspace block (or not).
    pub workspace: Option<bool>,
    /// A frame of the allocating stack carries this mark.
    pub made_by: Option<Mark>,
    /// A frame of the freeing stack carries this mark.
    pub freed_by: Option<Mark>,
    /// The allocation was made in one of these phases (any when empty).
    pub made_in: &'static [Phase],
    /// Its life against that phase.
    pub kept: Option<Kept>,
}

const ANY: When = When {
    traced: None,
    stacks: None,
    workspace: None,
    made_by: None,
    freed_by: None,
    made_in: &[],
    kept: None,
};

/// One rule.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// Its name, as reports cite it.
    pub id: &'static str,
    /// The role it gives.
    pub role: Role,
    /// When it applies.
    pub when: When,
    /// Why, in a line (reports show it for `unknown`).
    pub doc: &'static str,
}

use Kept::*;
use Phase::*;

/// The rules, first match wins. User rules (`[roles]`) come before all of them.
pub const RULES: &[Rule] = &[
    Rule {
        id: "untraced",
        role: Role::Untraced,
        when: When {
            traced: Some(false),
            ..ANY
        },
        doc: "no alloc event in the trace: made before recording began or before the ring buffer wrapped",
    },
    Rule {
        id: "no-stacks",
        role: Role::Unknown,
        when: When {
            stacks: Some(false),
            ..ANY
        },
        doc: "the trace records no stacks (context None or \"state\"), so phases cannot be told apart",
    },
    Rule {
        id: "npu-workspace",
        role: Role::Temporary,
        when: When {
            workspace: Some(true),
            ..ANY
        },
        doc: "a torch_npu workspace block (workspace_snapshot): kernels' scratch memory",
    },
    Rule {
        id: "accumulate-grad",
        role: Role::Gradient,
        when: When {
            made_by: Some(Mark::AccumulateGrad),
            kept: Some(BeyondPhase),
            ..ANY
        },
        doc: "made by AccumulateGrad and kept: a .grad",
    },
    Rule {
        id: "gradient-buffer",
        role: Role::Gradient,
        when: When {
            made_by: Some(Mark::GradientBuffer),
            ..ANY
        },
        doc: "made by a gradient buffer: DDP/Megatron grad buckets, a pipeline stage's received output gradient",
    },
    Rule {
        id: "zero-grad",
        role: Role::Gradient,
        when: When {
            freed_by: Some(Mark::ZeroGrad),
            ..ANY
        },
        doc: "freed by zero_grad: a .grad",
    },
    Rule {
        id: "setup",
        role: Role::Parameter,
        when: When {
            made_in: &[Setup],
            ..ANY
        },
        doc: "made by model set-up: construction, .to()/.cuda(), state-dict loading, FSDP/ZeRO flat parameters",
    },
    Rule {
        id: "optimizer-kept",
        role: Role::OptimizerState,
        when: When {
            made_in: &[Optimizer],
            kept: Some(BeyondPhase),
            ..ANY
        },
        doc: "made in the optimizer and kept past its step: optimizer state",
    },
    Rule {
        id: "optimizer-scratch",
        role: Role::Temporary,
        when: When {
            made_in: &[Optimizer],
            kept: Some(InPhase),
            ..ANY
        },
        doc: "made and freed inside the optimizer step",
    },
    Rule {
        id: "saved-for-backward",
        role: Role::Activation,
        when: When {
            freed_by: Some(Mark::SavedRelease),
            made_in: &[Forward, Other],
            ..ANY
        },
        doc: "released by SavedVariable::reset_data: saved by a forward for its backward",
    },
    Rule {
        id: "backward-kept",
        role: Role::Gradient,
        when: When {
            made_in: &[Backward],
            kept: Some(PastNextPhase),
            ..ANY
        },
        doc: "made in backward and alive when the next phase began (the optimizer, a forward): a gradient",
    },
    Rule {
        id: "backward-scratch",
        role: Role::Temporary,
        when: When {
            made_in: &[Backward],
            kept: Some(UntilNextPhase),
            ..ANY
        },
        doc: "made in a backward and freed inside it or as it returned",
    },
    Rule {
        id: "forward-scratch",
        role: Role::Temporary,
        when: When {
            made_in: &[Forward],
            kept: Some(InPhase),
            ..ANY
        },
        doc: "made and freed inside one forward",
    },
    Rule {
        id: "forward-kept",
        role: Role::Activation,
        when: When {
            made_in: &[Forward],
            kept: Some(BeyondPhase),
            ..ANY
        },
        doc: "made in a forward and alive past its end: saved for backward, or an output kept",
    },
    Rule {
        id: "loop-freed-in-backward",
        role: Role::Activation,
        when: When {
            made_in: &[Other],
            kept: Some(FreedInBackward),
            ..ANY
        },
        doc: "made around the forward (an input, a received buffer) and freed in backward",
    },
    Rule {
        id: "received-input",
        role: Role::Activation,
        when: When {
            made_by: Some(Mark::Received),
            made_in: &[Other],
            kept: Some(BeyondPhase),
            ..ANY
        },
        doc: "a pipeline stage's received input (P2P receive buffer), kept past the code that received it",
    },
    Rule {
        id: "loop-from-start",
        role: Role::Parameter,
        when: When {
            made_in: &[Other],
            kept: Some(FromStart),
            ..ANY
        },
        doc: "made before any forward or backward ran and never freed: alive across every step",
    },
    Rule {
        id: "loop-across-backward",
        role: Role::Activation,
        when: When {
            made_in: &[Other],
            kept: Some(AcrossBackward),
            ..ANY
        },
        doc: "made around the forward and alive when a backward began: an input kept for it",
    },
    Rule {
        id: "loop-input",
        role: Role::Activation,
        when: When {
            made_in: &[Other],
            kept: Some(AcrossForward),
            ..ANY
        },
        doc: "made around the forward and alive when a later forward began: an input of it (a batch, a received buffer)",
    },
    Rule {
        id: "loop-outlived-unit",
        role: Role::Activation,
        when: When {
            made_in: &[Other],
            kept: Some(OutlivedUnit),
            ..ANY
        },
        doc: "made around the model inside an annotated unit of work (a step, a request) and alive after it ended: an input or output handed on",
    },
    Rule {
        id: "loop-open-unit",
        role: Role::Activation,
        when: When {
            made_in: &[Other],
            kept: Some(InOpenUnit),
            ..ANY
        },
        doc: "made around the model inside the unit of work the capture cut off (its range still open at the end) and alive then: an input of that unit, as the earlier units' were",
    },
    Rule {
        id: "pass-output",
        role: Role::Activation,
        when: When {
            made_in: &[Other],
            kept: Some(PastItsPass),
            ..ANY
        },
        doc: "made in the code right after a forward (the loss, log-probs, a sampled token) and kept past that pass: the pass's output, handed on or kept",
    },
    Rule {
        id: "loop-scratch",
        role: Role::Temporary,
        when: When {
            made_in: &[Other],
            kept: Some(InPhase),
            ..ANY
        },
        doc: "made and freed in the code around the model (after a forward: in that pass)",
    },
    Rule {
        id: "unexplained",
        role: Role::Unknown,
        when: ANY,
        doc: "made outside forward, backward and the optimizer and kept past that code, with no forward or backward after it",
    },
];
