//! Stage 5, `analysis`: pure functions of a device's replay, windows and attribution (and
//! of the snapshot they come from). Each computes numbers and typed verdicts; words,
//! units and formats belong to `render`, and putting files, options and devices together
//! belongs to `session`.

pub mod allocations;
pub mod capture;
pub mod compare;
pub mod counters;
pub mod gc_held;
pub mod leaks;
pub mod oom;
pub mod phases;
pub mod point;
pub mod point_diff;
pub mod pools;
pub mod range;
pub mod ranks;
pub mod reserved;
pub mod roles;
pub mod segments;
pub mod spans;
pub mod summary;
pub mod timeline;
pub mod top;
pub mod tree;

pub use leaks::{Kind, LeakOptions};

/// The row of `key` in `rows` (kept in first-seen order), made by `new` the first time:
/// per-site tallies over a few allocations, where a map would be more than the work.
pub(crate) fn row_of<K: PartialEq, R>(
    rows: &mut Vec<(K, R)>,
    key: K,
    new: impl FnOnce() -> R,
) -> &mut R {
    let i = match rows.iter().position(|(k, _)| *k == key) {
        Some(i) => i,
        None => {
            rows.push((key, new()));
            rows.len() - 1
        }
    };
    &mut rows[i].1
}
pub use point::{At, AtError, Point, PointError};
