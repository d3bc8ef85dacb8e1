//! `leakscope top`: what holds memory at a point of a device's trace, grouped by call site
//! (or user frame, file, function, stack), largest first.

use serde::Serialize;

use super::point::Point;
use crate::attribute::{Attributor, Site};
use crate::model::StackId;
use crate::model::size::sum_sizes;
use crate::replay::Replay;

/// One group of live allocations.
#[derive(Clone, Debug, Serialize)]
pub struct TopRow {
    /// Where the memory comes from.
    pub site: Site,
    /// Live requested bytes.
    pub bytes: u64,
    /// Fraction of the live bytes at this point.
    pub share: f64,
    /// Live allocations.
    pub blocks: u64,
}

/// What the rows beyond `--limit` add up to.
#[derive(Clone, Debug, Serialize, Default)]
pub struct Rest {
    /// Number of keys not shown.
    pub keys: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their allocations.
    pub blocks: u64,
}

/// What one device holds at a point.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceTop {
    /// Device.
    pub device: i64,
    /// The point.
    pub at: Point,
    /// Σ bytes of all groups (equals `at.requested_bytes` unless `--focus` leaves some out).
    pub total_bytes: u64,
    /// Σ allocations.
    pub total_blocks: u64,
    /// Groups, largest first.
    pub rows: Vec<TopRow>,
    /// Groups beyond the limit.
    pub rest: Rest,
}

/// `(key, bytes, allocations)` of `(stack, bytes)` allocations grouped by `attr`'s key
/// (those it leaves out skipped), largest first; ties by label so the order is stable.
pub(crate) fn grouped(
    allocations: impl Iterator<Item = (StackId, u64)>,
    attr: &mut Attributor,
) -> Vec<(u32, u64, u64)> {
    let mut sums: Vec<(u64, u64)> = Vec::new();
    for (stack, bytes) in allocations {
        let Some(k) = attr.key(stack) else { continue };
        let k = k as usize;
        if sums.len() <= k {
            sums.resize(k + 1, (0, 0));
        }
        sums[k].0 = sums[k].0.saturating_add(bytes);
        sums[k].1 += 1;
    }
    let mut groups: Vec<(u32, u64, u64)> = sums
        .iter()
        .enumerate()
        .filter(|(_, s)| s.1 > 0)
        .map(|(k, s)| (k as u32, s.0, s.1))
        .collect();
    groups.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| attr.site(a.0).label.cmp(&attr.site(b.0).label))
    });
    groups
}

/// Groups the allocations live at `point` by `attr`'s key; `limit` rows, the rest summed.
pub fn top(replay: &Replay, point: Point, attr: &mut Attributor, limit: usize) -> DeviceTop {
    let groups = grouped(
        replay
            .live_set(point.event_index)
            .map(|l| (l.stack, l.bytes)),
        attr,
    );
    let total_bytes = sum_sizes(groups.iter().map(|g| g.1));
    let total_blocks: u64 = groups.iter().map(|g| g.2).sum();
    // The groups add up to the live bytes (less with `--focus`); where an impossible
    // file's sizes stopped a count at the top they may not, and a share is still of the
    // larger whole, never above 1.
    let whole = point.requested_bytes.max(total_bytes);
    let share = |b: u64| {
        if whole == 0 {
            0.0
        } else {
            b as f64 / whole as f64
        }
    };
    let mut rest = Rest::default();
    let mut rows = Vec::new();
    for (i, (k, bytes, blocks)) in groups.into_iter().enumerate() {
        if i < limit {
            rows.push(TopRow {
                site: attr.site(k).clone(),
                bytes,
                share: share(bytes),
                blocks,
            });
        } else {
            rest.keys += 1;
            rest.bytes = rest.bytes.saturating_add(bytes);
            rest.blocks += blocks;
        }
    }
    DeviceTop {
        device: replay.device,
        at: point,
        total_bytes,
        total_blocks,
        rows,
        rest,
    }
}
