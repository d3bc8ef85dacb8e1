//! Which frames count, as a profiler user expects: PyTorch's own omit list, the user's
//! `--exclude`, `--focus`, `--python-only` and `--user-code`, applied once per frame.

use regex::Regex;

use crate::model::{Frame, Snapshot};

use super::site::frame_label;

/// Frame filtering options.
///
/// ```
/// use leakscope::attribute::FrameFilters;
/// let mut f = FrameFilters::default();
/// f.python_only = true;
/// f.exclude = Some(regex::Regex::new("torch/utils/checkpoint").unwrap());
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct FrameFilters {
    /// Keep interpreter and dispatcher frames PyTorch's viewer hides.
    pub keep_internal: bool,
    /// Drop frames whose `file:line:function` matches.
    pub exclude: Option<Regex>,
    /// Count only allocations with a frame whose `file:line:function` matches.
    pub focus: Option<Regex>,
    /// Drop C++ frames.
    pub python_only: bool,
    /// Frames that are the user's code (default: outside torch, stdlib, site-packages).
    pub user_code: Option<Regex>,
}

/// PyTorch's own omit list (`_memory_viz._frame_filter`, `MemoryViz.js frameFilter`):
/// interpreter and dispatcher internals, by name and by file.
const OMIT_NAME: &[&str] = &[
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];
const OMIT_FILE: &[&str] = &[
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// C++ frames that are the machinery of an allocation, not its cause.
const CPP_INTERNAL_PREFIX: &[&str] = &[
    "c10::",
    "at::",
    "torch::unwind",
    "torch::CapturedTraceback",
    "torch::cuda::",
    "torch::autograd::THPVariable",
    "torch::autograd::VariableType",
    "torch::autograd::(anonymous",
    "std::",
    "void c10::",
    "void at::",
    "_PyObject",
    "_PyEval",
    "_PyFunction",
    "cfunction_",
    "method_vectorcall",
    "type_call",
];

/// True for a frame of Python code (as opposed to C++ or interpreter frames).
pub fn is_python(snap: &Snapshot, f: &Frame) -> bool {
    let file = snap.strings.get(f.filename);
    file.ends_with(".py") || (file.starts_with('<') && f.line.known().is_some_and(|l| l > 0))
}

fn default_user(file: &str) -> bool {
    !(file.contains("/site-packages/")
        || file.contains("/dist-packages/")
        || file.contains("/torch/")
        || file.contains("/lib/python3")
        || file.contains("\\lib\\")
        || file.starts_with("<frozen"))
}

/// What the filters say about one frame.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FrameClass {
    /// Left out of stacks.
    pub dropped: bool,
    /// Python code.
    pub python: bool,
    /// Allocator, dispatcher or ATen machinery.
    pub cpp_internal: bool,
    /// The user's own code.
    pub user: bool,
    /// Matches `--focus`.
    pub focus: bool,
}

/// Every frame of a snapshot classified once.
#[derive(Debug, Default)]
pub(crate) struct FrameClasses {
    pub classes: Vec<FrameClass>,
    /// `--focus` is set: allocations without a focus frame are left out.
    pub focus: bool,
}

impl FrameClasses {
    pub fn new(snap: &Snapshot, opts: &FrameFilters) -> FrameClasses {
        let classes = snap
            .frames
            .iter()
            .map(|f| classify(snap, f, opts))
            .collect();
        FrameClasses {
            classes,
            focus: opts.focus.is_some(),
        }
    }
}

fn classify(snap: &Snapshot, f: &Frame, opts: &FrameFilters) -> FrameClass {
    let name = snap.strings.get(f.name);
    let file = snap.strings.get(f.filename);
    let python = is_python(snap, f);
    let omitted = !opts.keep_internal
        && (OMIT_NAME.iter().any(|p| name.contains(p))
            || OMIT_FILE.iter().any(|p| file.contains(p)));
    let label = || frame_label(snap, f);
    let excluded = opts.exclude.as_ref().is_some_and(|r| r.is_match(&label()));
    FrameClass {
        dropped: omitted || excluded || (opts.python_only && !python),
        python,
        cpp_internal: !python && CPP_INTERNAL_PREFIX.iter().any(|p| name.starts_with(p)),
        user: python
            && match &opts.user_code {
                Some(r) => r.is_match(&label()),
                None => default_user(file),
            },
        focus: opts.focus.as_ref().is_some_and(|r| r.is_match(&label())),
    }
}
