//! `--by pool`: the memory pool each allocation's block lies in.
//!
//! Rule: the `pool_id` its `alloc` event records (2026 traces); else the pool of the final
//! segment holding its address; else (its segment was released before the end and the
//! trace names no pool) the default pool.

use super::Site;
use super::names::NameMap;
use crate::model::{DeviceView, PoolId};
use crate::replay::{Origin, Replay};

/// The label of a pool: `default pool (0, 0)` or `private pool (0, 1)`.
pub fn pool_label(id: PoolId) -> String {
    if id.is_private() {
        format!("private pool {id}")
    } else {
        format!("default pool {id}")
    }
}

/// Each allocation's pool, as names `--by pool` groups by.
pub fn pool_map(view: &DeviceView, replay: &Replay) -> NameMap {
    let mut ranges: Vec<(u64, u64, PoolId)> = view
        .segments
        .iter()
        .map(|s| (s.address, s.address.saturating_add(s.total_size), s.pool()))
        .collect();
    ranges.sort_unstable_by_key(|r| r.0);
    let final_pool = |addr: u64| {
        let i = ranges.partition_point(|r| r.0 <= addr);
        i.checked_sub(1)
            .map(|i| ranges[i])
            .filter(|r| addr < r.1)
            .map_or(PoolId::DEFAULT, |r| r.2)
    };
    let traced_pools = view.trace.meta.iter().any(|m| {
        view.metas
            .get(m.index())
            .is_some_and(|m| m.pool_id.is_some())
    });
    let mut ids: Vec<PoolId> = Vec::new();
    let of = replay
        .lifetimes
        .iter()
        .map(|l| {
            let pool = match l.origin {
                Origin::Traced(a) if traced_pools => view.pool_of(a as usize),
                _ => final_pool(l.addr),
            };
            match ids.iter().position(|&p| p == pool) {
                Some(k) => k as u32,
                None => {
                    ids.push(pool);
                    (ids.len() - 1) as u32
                }
            }
        })
        .collect();
    let names = ids
        .into_iter()
        .map(|p| Site::label_only(pool_label(p)))
        .collect();
    NameMap::from_parts(names, of)
}
