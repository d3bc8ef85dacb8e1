//! Stage 3, `attribute`: which call site (or user frame, file, function, whole stack) an
//! allocation belongs to, after filtering frames the way a profiler user expects.

use regex::Regex;

use crate::model::fxhash::FastMap;
use crate::model::{Frame, FrameId, Snapshot, StackId};

/// What allocations are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GroupBy {
    /// The allocating call site: innermost Python frame (`file:line:function`), else the
    /// innermost C++ frame outside the allocator, dispatcher and ATen.
    #[default]
    Site,
    /// The first frame of the user's own code (outside torch, the standard library and
    /// installed packages, or as `--user-code` says).
    User,
    /// The whole filtered stack.
    Stack,
    /// The site's file.
    File,
    /// The site's function (`file:function`).
    Function,
}

impl GroupBy {
    /// Name as used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Site => "site",
            GroupBy::User => "user",
            GroupBy::Stack => "stack",
            GroupBy::File => "file",
            GroupBy::Function => "function",
        }
    }

    /// Parses a `--by` value.
    pub fn parse(s: &str) -> Option<GroupBy> {
        Some(match s {
            "site" => GroupBy::Site,
            "user" => GroupBy::User,
            "stack" => GroupBy::Stack,
            "file" => GroupBy::File,
            "function" => GroupBy::Function,
            _ => return None,
        })
    }
}

/// Frame filtering options.
#[derive(Clone, Debug, Default)]
pub struct FilterOptions {
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

/// `file:line:function` of a frame.
pub fn frame_label(snap: &Snapshot, f: &Frame) -> String {
    format!(
        "{}:{}:{}",
        snap.strings.get(f.filename),
        f.line,
        snap.strings.get(f.name)
    )
}

#[derive(Clone, Copy, Default)]
struct FrameClass {
    dropped: bool,
    python: bool,
    cpp_internal: bool,
    user: bool,
    focus: bool,
}

/// The grouping key of an allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// Text shown for the key.
    pub label: String,
    /// The frame the key is about (site, user frame), when there is one.
    pub frame: Option<FrameId>,
}

/// Label used when a stack has no frame to attribute to (autograd-engine allocations
/// recorded with `stacks="python"` have none).
pub const NO_FRAME: &str = "<no python frame>";

/// Maps stacks to keys, caching per stack.
pub struct Attributor<'s> {
    snap: &'s Snapshot,
    by: GroupBy,
    classes: Vec<FrameClass>,
    focus: bool,
    cache: FastMap<StackId, Option<u32>>,
    keys: Vec<Key>,
    key_index: FastMap<Key, u32>,
}

fn default_user(file: &str) -> bool {
    !(file.contains("/site-packages/")
        || file.contains("/dist-packages/")
        || file.contains("/torch/")
        || file.contains("/lib/python3")
        || file.contains("\\lib\\")
        || file.starts_with("<frozen"))
}

impl<'s> Attributor<'s> {
    /// An attributor for `snap` grouping by `by`.
    pub fn new(snap: &'s Snapshot, by: GroupBy, opts: &FilterOptions) -> Self {
        let classes = snap
            .frames
            .iter()
            .map(|f| {
                let name = snap.strings.get(f.name);
                let file = snap.strings.get(f.filename);
                let python = is_python(snap, f);
                let omitted = !opts.keep_internal
                    && (OMIT_NAME.iter().any(|p| name.contains(p))
                        || OMIT_FILE.iter().any(|p| file.contains(p)));
                let label = || frame_label(snap, f);
                let excluded = opts.exclude.as_ref().is_some_and(|r| r.is_match(&label()));
                let dropped = omitted || excluded || (opts.python_only && !python);
                FrameClass {
                    dropped,
                    python,
                    cpp_internal: !python
                        && CPP_INTERNAL_PREFIX.iter().any(|p| name.starts_with(p)),
                    user: python
                        && match &opts.user_code {
                            Some(r) => r.is_match(&label()),
                            None => default_user(file),
                        },
                    focus: opts.focus.as_ref().is_some_and(|r| r.is_match(&label())),
                }
            })
            .collect();
        Attributor {
            snap,
            by,
            classes,
            focus: opts.focus.is_some(),
            cache: FastMap::default(),
            keys: Vec::new(),
            key_index: FastMap::default(),
        }
    }

    /// The grouping.
    pub fn by(&self) -> GroupBy {
        self.by
    }

    /// The frames of `stack` that survive filtering, innermost first.
    pub fn filtered(&self, stack: StackId) -> Vec<FrameId> {
        self.snap
            .stacks
            .get(stack)
            .iter()
            .copied()
            .filter(|f| !self.classes[f.index()].dropped)
            .collect()
    }

    /// The frame an allocation with `frames` (filtered, innermost first) is charged to.
    fn site(&self, frames: &[FrameId]) -> Option<FrameId> {
        let class = |f: &FrameId| self.classes[f.index()];
        frames
            .iter()
            .find(|f| class(f).python)
            .or_else(|| frames.iter().find(|f| !class(f).cpp_internal))
            .or_else(|| frames.first())
            .copied()
    }

    fn make_key(&self, stack: StackId) -> Option<Key> {
        let frames = self.filtered(stack);
        if self.focus
            && !self
                .snap
                .stacks
                .get(stack)
                .iter()
                .any(|f| self.classes[f.index()].focus)
        {
            return None;
        }
        let snap = self.snap;
        let label_of = |f: FrameId| frame_label(snap, snap.frames.get(f));
        let key = match self.by {
            GroupBy::Site => match self.site(&frames) {
                Some(f) => Key {
                    label: label_of(f),
                    frame: Some(f),
                },
                None => Key {
                    label: NO_FRAME.into(),
                    frame: None,
                },
            },
            GroupBy::User => match frames.iter().find(|f| self.classes[f.index()].user) {
                Some(&f) => Key {
                    label: label_of(f),
                    frame: Some(f),
                },
                None => Key {
                    label: "<no user frame>".into(),
                    frame: None,
                },
            },
            GroupBy::Stack => Key {
                label: if frames.is_empty() {
                    NO_FRAME.into()
                } else {
                    frames
                        .iter()
                        .rev()
                        .map(|&f| label_of(f))
                        .collect::<Vec<_>>()
                        .join(";")
                },
                frame: self.site(&frames),
            },
            GroupBy::File | GroupBy::Function => match self.site(&frames) {
                Some(f) => {
                    let fr = snap.frames.get(f);
                    let file = snap.strings.get(fr.filename);
                    Key {
                        label: if self.by == GroupBy::File {
                            file.to_string()
                        } else {
                            format!("{file}:{}", snap.strings.get(fr.name))
                        },
                        frame: Some(f),
                    }
                }
                None => Key {
                    label: NO_FRAME.into(),
                    frame: None,
                },
            },
        };
        Some(key)
    }

    /// The key id of an allocation with `stack`, or `None` when `--focus` leaves it out.
    pub fn key(&mut self, stack: StackId) -> Option<u32> {
        if let Some(&k) = self.cache.get(&stack) {
            return k;
        }
        let k = self
            .make_key(stack)
            .map(|key| match self.key_index.get(&key) {
                Some(&i) => i,
                None => {
                    let i = self.keys.len() as u32;
                    self.keys.push(key.clone());
                    self.key_index.insert(key, i);
                    i
                }
            });
        self.cache.insert(stack, k);
        k
    }

    /// The key behind an id.
    pub fn key_info(&self, id: u32) -> &Key {
        &self.keys[id as usize]
    }

    /// The snapshot.
    pub fn snapshot(&self) -> &'s Snapshot {
        self.snap
    }
}
