//! The one object every report uses to name where memory comes from.

use serde::{Deserialize, Serialize};

use crate::model::{Frame, Snapshot};

/// Label used when a traced allocation's stack has no frame to attribute to
/// (autograd-engine allocations recorded with `stacks="python"` have none); its role says
/// what it is.
pub const NO_FRAME: &str = "<no python frame>";

/// Label of live memory that no trace event explains and no frame names: blocks
/// allocated before recording began (weights loaded first) or before the ring buffer
/// wrapped. Never [`NO_FRAME`]: that is the autograd engine's memory.
pub const UNTRACED: &str = "<untraced>";

/// Label of `--by user` for a stack with no frame of the user's code.
pub const NO_USER_FRAME: &str = "<no user frame>";

/// Where memory comes from, as every JSON output writes it: `{name, filename, line,
/// label}`. `label` is what tables show and what `--by` grouped on (`file:line:function`
/// for a call site, the file for `--by file`, the joined stack for `--by stack`); the
/// other fields are the frame behind it, `null` where the grouping has none (a stack with
/// no frame; the line for `--by file` and `--by function`; a line the C++ unwinder did not
/// know).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Site {
    /// Function name.
    pub name: Option<String>,
    /// File name as recorded.
    pub filename: Option<String>,
    /// Line number (`null` when unknown or not part of the grouping).
    pub line: Option<i64>,
    /// The text shown for the site.
    pub label: String,
}

impl Site {
    /// A site with only a label (no frame behind it).
    pub fn label_only(label: impl Into<String>) -> Site {
        Site {
            name: None,
            filename: None,
            line: None,
            label: label.into(),
        }
    }

    /// The call site `f`: `file:line:function`.
    pub fn of_frame(snap: &Snapshot, f: &Frame) -> Site {
        Site {
            name: Some(snap.strings.get(f.name).to_string()),
            filename: Some(snap.strings.get(f.filename).to_string()),
            line: f.line.known(),
            label: frame_label(snap, f),
        }
    }

    /// The function part of the label (the name), else the whole label.
    pub fn function(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.label)
    }

    /// `file:line` (with `?` for an unknown line) when the site has a file.
    pub fn location(&self) -> Option<String> {
        let file = self.filename.as_deref()?;
        Some(match self.line {
            Some(l) => format!("{file}:{l}"),
            None => file.to_string(),
        })
    }
}

/// `file:line:function` of a frame (`?` for a line the unwinder did not know).
/// The frames of `stack` as `file:line:function`, innermost first.
pub fn stack_labels(snap: &Snapshot, stack: crate::model::StackId) -> Vec<String> {
    snap.stacks
        .get(stack)
        .iter()
        .map(|&f| frame_label(snap, snap.frames.get(f)))
        .collect()
}

/// A frame as `file:line:function`.
pub fn frame_label(snap: &Snapshot, f: &Frame) -> String {
    format!(
        "{}:{}:{}",
        snap.strings.get(f.filename),
        f.line,
        snap.strings.get(f.name)
    )
}
