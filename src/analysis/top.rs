//! `leakscope top`: what holds memory at a point of a device's trace, grouped by call site
//! (or user frame, file, function, stack), largest first.

use serde::Serialize;

use super::point::Point;
use crate::attribute::names::Names;
use crate::attribute::roles::RoleId;
use crate::attribute::{Attributor, Site};
use crate::model::size::sum_sizes;
use crate::replay::Replay;

/// The bytes of one role in a group.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RoleBytes {
    /// The role's name.
    pub role: String,
    /// Its live requested bytes in the group.
    pub bytes: u64,
}

/// One group of live allocations.
#[derive(Clone, Debug, Serialize)]
pub struct TopRow {
    /// Where the memory comes from (under `--by role`: the role, as a label).
    pub site: Site,
    /// The role of most of its bytes (the role itself under `--by role`).
    pub role: String,
    /// Its bytes by role, largest first.
    pub roles: Vec<RoleBytes>,
    /// The names its memory was given, per kind (annotation, metadata, compile): those of
    /// most of its named bytes; absent when the snapshot carries none.
    #[serde(skip_serializing_if = "Names::is_empty")]
    pub names: Names,
    /// Live requested bytes.
    pub bytes: u64,
    /// Fraction of the live bytes at this point.
    pub share: f64,
    /// Live allocations.
    pub blocks: u64,
    /// The stack of its largest live allocation, innermost first, as
    /// `file:line:function` (filled by [`top_with_stacks`] only; absent from JSON when
    /// empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<String>,
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

/// Live allocations of one key.
pub(crate) struct Group {
    /// The key.
    pub key: u32,
    /// Their bytes.
    pub bytes: u64,
    /// Their number.
    pub blocks: u64,
    /// Their bytes per role, largest first.
    pub roles: Vec<(RoleId, u64)>,
    /// The largest of them (lifetime index; the first made on ties).
    pub largest: usize,
    /// The names beside it.
    pub names: Names,
}

impl Group {
    /// The role of most of the bytes, and the bytes by role, named.
    pub fn named_roles(&self, attr: &Attributor) -> (String, Vec<RoleBytes>) {
        let name = |r: RoleId| attr.roles().map_or("unknown", |m| m.name(r)).to_string();
        let roles: Vec<RoleBytes> = self
            .roles
            .iter()
            .map(|&(r, bytes)| RoleBytes {
                role: name(r),
                bytes,
            })
            .collect();
        let first = roles
            .first()
            .map_or_else(|| "unknown".to_string(), |r| r.role.clone());
        (first, roles)
    }
}

/// The live allocations `(lifetime index, bytes)` grouped by `attr`'s key (those it
/// leaves out skipped), largest first; ties by label so the order is stable.
pub(crate) fn grouped(
    replay: &Replay,
    live: impl Iterator<Item = usize>,
    attr: &mut Attributor,
) -> Vec<Group> {
    let mut sums: Vec<(u64, u64)> = Vec::new();
    let mut largest: Vec<usize> = Vec::new();
    // (key, role) -> bytes, for the role breakdown of each row.
    let mut by_role: Vec<(u32, RoleId, u64)> = Vec::new();
    // (key, lifetime), for the names beside each row (when the snapshot has names).
    let mut members: Vec<(u32, usize)> = Vec::new();
    let with_names = attr.has_names_beside();
    for i in live {
        let l = &replay.lifetimes[i];
        let Some(k) = attr.key_of(i, l) else { continue };
        let ku = k as usize;
        if sums.len() <= ku {
            sums.resize(ku + 1, (0, 0));
            largest.resize(ku + 1, i);
        }
        let big = &mut largest[ku];
        if sums[ku].1 == 0 || l.bytes > replay.lifetimes[*big].bytes {
            *big = i;
        }
        sums[ku].0 = sums[ku].0.saturating_add(l.bytes);
        sums[ku].1 += 1;
        by_role.push((k, attr.role(i), l.bytes));
        if with_names {
            members.push((k, i));
        }
    }
    members.sort_unstable();
    let mut names_of: Vec<Names> = vec![Names::new(); sums.len()];
    for chunk in members.chunk_by(|a, b| a.0 == b.0) {
        let lifes = chunk.iter().map(|&(_, i)| (i, replay.lifetimes[i].bytes));
        names_of[chunk[0].0 as usize] = attr.names_of(lifes);
    }
    by_role.sort_unstable_by_key(|&(k, r, _)| (k, r));
    let mut roles_of: Vec<Vec<(RoleId, u64)>> = vec![Vec::new(); sums.len()];
    for (k, r, b) in by_role {
        let v = &mut roles_of[k as usize];
        match v.last_mut() {
            Some(last) if last.0 == r => last.1 = last.1.saturating_add(b),
            _ => v.push((r, b)),
        }
    }
    let mut groups: Vec<Group> = sums
        .iter()
        .zip(roles_of)
        .zip(names_of)
        .enumerate()
        .filter(|(_, ((s, _), _))| s.1 > 0)
        .map(|(k, ((s, mut roles), names))| {
            roles.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            Group {
                key: k as u32,
                bytes: s.0,
                blocks: s.1,
                roles,
                largest: largest[k],
                names,
            }
        })
        .collect();
    groups.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then_with(|| attr.site(a.key).label.cmp(&attr.site(b.key).label))
    });
    groups
}

/// Groups the allocations live at `point` by `attr`'s key; `limit` rows, the rest summed.
pub fn top(replay: &Replay, point: Point, attr: &mut Attributor, limit: usize) -> DeviceTop {
    top_of(replay, point, attr, limit, false)
}

/// [`top`] with each row's [`TopRow::stack`]: the stack of its largest live allocation.
pub fn top_with_stacks(
    replay: &Replay,
    point: Point,
    attr: &mut Attributor,
    limit: usize,
) -> DeviceTop {
    top_of(replay, point, attr, limit, true)
}

fn top_of(
    replay: &Replay,
    point: Point,
    attr: &mut Attributor,
    limit: usize,
    stacks: bool,
) -> DeviceTop {
    let groups = grouped(replay, replay.live_indices(point.event_index), attr);
    let total_bytes = sum_sizes(groups.iter().map(|g| g.bytes));
    let total_blocks: u64 = groups.iter().map(|g| g.blocks).sum();
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
    for (i, g) in groups.into_iter().enumerate() {
        if i < limit {
            let (role, roles) = g.named_roles(attr);
            rows.push(TopRow {
                site: attr.site(g.key).clone(),
                role,
                roles,
                names: g.names,
                bytes: g.bytes,
                share: share(g.bytes),
                blocks: g.blocks,
                stack: if stacks {
                    let snap = attr.snapshot();
                    crate::attribute::stack_labels(snap, replay.lifetimes[g.largest].stack)
                } else {
                    Vec::new()
                },
            });
        } else {
            rest.keys += 1;
            rest.bytes = rest.bytes.saturating_add(g.bytes);
            rest.blocks += g.blocks;
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
