//! Analyses over the loaded model. Each produces a serializable report whose JSON form
//! carries a versioned `schema` name.

pub mod check;
pub mod compare;
pub mod leaks;
pub mod oom;
pub mod ranks;
pub mod report;
pub mod segments;
pub mod summary;
pub mod timeline;
pub mod top;
pub mod tree;

use crate::model::Snapshot;

/// The device analyses look at when none is named: the one with the longest trace, else
/// the one holding the most bytes (PyTorch's viewer picks the longest trace too).
pub fn default_device(snap: &Snapshot) -> i64 {
    let devs = snap.devices();
    devs.iter()
        .max_by_key(|d| (d.trace.len(), d.held_bytes(), std::cmp::Reverse(d.device)))
        .map_or(0, |d| d.device)
}
