//! Two runs at the same kind of point (their peaks, their ends, their OOMs), site by site:
//! what each holds there and the difference, so that "why did the peak go up" has an
//! answer in source lines. Every live byte of either point is in exactly one row, so the
//! rows' differences add up to the difference of the totals.

use serde::Serialize;

use super::point::Point;
use super::top::{DeviceTop, TopRow};
use crate::attribute::Site;
use crate::model::fxhash::FastMap;

/// One site at the two points.
#[derive(Clone, Debug, Serialize)]
pub struct SiteDiff {
    /// The site (or role, under `--by role`).
    pub site: Site,
    /// The role of most of its bytes (B's where B holds any, else A's).
    pub role: String,
    /// Its bytes at A's point.
    pub a_bytes: u64,
    /// Its bytes at B's point.
    pub b_bytes: u64,
    /// `b_bytes - a_bytes`.
    pub difference: i64,
    /// Its live allocations at A's point.
    pub a_blocks: u64,
    /// Its live allocations at B's point.
    pub b_blocks: u64,
    /// For the [`STACKS_SHOWN`] largest changes: the stack of the site's largest live
    /// allocation in the run that holds more of it (B when it grew, A when it shrank),
    /// innermost first (absent from JSON otherwise, or when the tops had no stacks).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<String>,
}

/// The largest changes whose stacks a comparison shows.
pub const STACKS_SHOWN: usize = 5;

/// A device of run A against its partner in run B, at one kind of point.
#[derive(Clone, Debug, Serialize)]
pub struct DevicePointDiff {
    /// A's device.
    pub device_a: i64,
    /// B's device.
    pub device_b: i64,
    /// A's point.
    pub a: Point,
    /// B's point.
    pub b: Point,
    /// A's live bytes there.
    pub a_total: u64,
    /// B's live bytes there.
    pub b_total: u64,
    /// `b_total - a_total`: the sum of the rows' differences.
    pub difference: i64,
    /// Every site of either point, the largest change (either way) first.
    pub rows: Vec<SiteDiff>,
}

fn signed(b: u64, a: u64) -> i64 {
    (i128::from(b) - i128::from(a)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Puts `a` and `b` (each `top` at its point with no row limit) side by side.
pub fn point_diff(a: &DeviceTop, b: &DeviceTop) -> DevicePointDiff {
    let mut index: FastMap<&Site, usize> = FastMap::default();
    let mut rows: Vec<SiteDiff> = Vec::new();
    // Each site's row in A and in B, for the stacks.
    let mut at_side: Vec<[Option<&TopRow>; 2]> = Vec::new();
    for (side, top) in [(0, a), (1, b)] {
        for r in &top.rows {
            let k = *index.entry(&r.site).or_insert_with(|| {
                rows.push(SiteDiff {
                    site: r.site.clone(),
                    role: r.role.clone(),
                    a_bytes: 0,
                    b_bytes: 0,
                    difference: 0,
                    a_blocks: 0,
                    b_blocks: 0,
                    stack: Vec::new(),
                });
                at_side.push([None, None]);
                rows.len() - 1
            });
            at_side[k][side] = Some(r);
            let row = &mut rows[k];
            if side == 0 {
                row.a_bytes += r.bytes;
                row.a_blocks += r.blocks;
            } else {
                row.b_bytes += r.bytes;
                row.b_blocks += r.blocks;
                row.role = r.role.clone();
            }
        }
    }
    for r in &mut rows {
        r.difference = signed(r.b_bytes, r.a_bytes);
    }
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&i, &j| {
        let (x, y) = (&rows[i], &rows[j]);
        y.difference
            .unsigned_abs()
            .cmp(&x.difference.unsigned_abs())
            .then_with(|| y.difference.cmp(&x.difference))
            .then_with(|| x.site.label.cmp(&y.site.label))
    });
    let mut slots: Vec<Option<SiteDiff>> = rows.into_iter().map(Some).collect();
    let rows: Vec<SiteDiff> = order
        .iter()
        .enumerate()
        .filter_map(|(rank, &i)| {
            let mut r = slots[i].take()?;
            if rank < STACKS_SHOWN {
                let sides = &at_side[i];
                let larger = if r.difference >= 0 {
                    sides[1]
                } else {
                    sides[0]
                };
                r.stack = larger.map(|t| t.stack.clone()).unwrap_or_default();
            }
            Some(r)
        })
        .collect();
    DevicePointDiff {
        device_a: a.device,
        device_b: b.device,
        a: a.at.clone(),
        b: b.at.clone(),
        a_total: a.total_bytes,
        b_total: b.total_bytes,
        difference: signed(b.total_bytes, a.total_bytes),
        rows,
    }
}
