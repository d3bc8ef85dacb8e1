//! Roles for the exports: the role of each trace event (the `role` column of
//! `events.parquet`), each role's live bytes over the trace (Perfetto's role counters),
//! and the role of each survivor (pprof's `role` label of the growth profile).
//!
//! Every figure reads the roles the device's [`Attributor`] was given
//! ([`Attributor::role`], by lifetime index) and the replay's lifetimes; nothing here
//! decides a role.

use crate::attribute::Attributor;
use crate::model::Trace;
use crate::replay::{Origin, Replay};

/// An event of no allocation (a segment event, an OOM, a stray `free_requested`) in
/// [`event_roles`].
pub(crate) use crate::export::encode::parquet::events::NO_ROLE;

/// The role id of the allocation each event of `trace` belongs to (its `alloc`, its
/// `free_requested`, the free that ends it), [`NO_ROLE`] for events of no allocation.
/// `replay` is the trace's and `attr` holds its roles.
pub(crate) fn event_roles(trace: &Trace, replay: &Replay, attr: &Attributor) -> Vec<u8> {
    let n = trace.len();
    let mut out = vec![NO_ROLE; n];
    let mut set = |e: Option<u32>, r: u8| {
        if let Some(x) = e.and_then(|e| out.get_mut(e as usize)) {
            *x = r;
        }
    };
    for (i, l) in replay.lifetimes.iter().enumerate() {
        let r = attr.role(i).0;
        if let Origin::Traced(a) = l.origin {
            set(Some(a), r);
        }
        set(l.free_requested, r);
        // An allocation closed by a second `alloc` at its address (a lost free) ends at
        // that alloc, which is the next allocation's event.
        let freed = l
            .freed
            .filter(|&f| trace.action.get(f as usize).is_some_and(|a| a.frees()));
        set(freed, r);
    }
    out
}

/// The name of role `id` of `attr`'s roles (`unknown` before roles are classified).
pub(crate) fn role_name<'a>(attr: &'a Attributor, id: u8) -> &'a str {
    use crate::attribute::roles::{Role, RoleId};
    attr.roles()
        .map_or(Role::Unknown.name(), |m| m.name(RoleId(id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::roles::role_series;
    use crate::model::Action;
    use crate::session::{Options, Session};

    fn session(name: &str) -> Session {
        Session::open(
            format!("fixtures/scenarios/{name}.pickle"),
            Default::default(),
        )
        .unwrap()
    }

    /// Every alloc and free of an allocation the trace shows has a role; segment events
    /// and OOMs have none; an allocation's events share its role.
    #[test]
    fn events_take_their_allocations_role() {
        for name in [
            "plain_loop_kept_logits",
            "fragmentation_oom",
            "wrapped_ring_buffer",
        ] {
            let s = session(name);
            let runs = s.runs(&Options::default()).unwrap();
            for r in &runs {
                let t = r.view.trace;
                let roles = event_roles(t, &r.replay, &r.attr);
                for (i, &a) in t.action.iter().enumerate() {
                    if a == Action::ALLOC {
                        assert_ne!(roles[i], NO_ROLE, "{name}: alloc {i}");
                    }
                    if matches!(
                        a,
                        Action::SEGMENT_ALLOC
                            | Action::SEGMENT_FREE
                            | Action::SEGMENT_MAP
                            | Action::SEGMENT_UNMAP
                            | Action::OOM
                    ) {
                        assert_eq!(roles[i], NO_ROLE, "{name}: {a:?} {i}");
                    }
                }
                for (i, l) in r.replay.lifetimes.iter().enumerate() {
                    if let (Origin::Traced(a), Some(f)) = (l.origin, l.freed)
                        && t.action[f as usize].frees()
                    {
                        assert_eq!(roles[a as usize], roles[f as usize], "{name}: {i}");
                        assert_eq!(roles[a as usize], r.attr.role(i).0);
                    }
                }
            }
        }
    }

    /// The roles' series add up to the live bytes before the first event and after the
    /// last; undecimated, after every event; each series' peak is its largest point.
    #[test]
    fn role_series_add_up_to_the_live_bytes() {
        for name in [
            "plain_loop_kept_logits",
            "two_devices_recv_leak",
            "npu_shaped",
        ] {
            let s = session(name);
            let runs = s.runs(&Options::default()).unwrap();
            for r in &runs {
                let rep = &r.replay;
                if rep.is_empty() {
                    continue;
                }
                // Exact: a bucket per event.
                let exact = role_series(rep, &r.attr, rep.len() + 1);
                let total0: u64 = exact.iter().map(|x| x.series.initial).sum();
                assert_eq!(total0, rep.initial_requested, "{name}");
                let mut now: Vec<u64> = exact.iter().map(|x| x.series.initial).collect();
                let mut cursor = vec![0usize; exact.len()];
                for i in 0..rep.len() {
                    for (k, x) in exact.iter().enumerate() {
                        while let Some(&(e, v)) = x.series.points.get(cursor[k]) {
                            if e as usize > i {
                                break;
                            }
                            now[k] = v;
                            cursor[k] += 1;
                        }
                    }
                    assert_eq!(now.iter().sum::<u64>(), rep.requested[i], "{name}: {i}");
                }
                for x in &exact {
                    let most = x.series.points.iter().map(|p| p.1).max().unwrap_or(0);
                    assert_eq!(x.peak, most.max(x.series.initial), "{name}: {}", x.role);
                }
                // Decimated: the end is still exact, and the points are few.
                let few = role_series(rep, &r.attr, 4);
                let end: u64 = few
                    .iter()
                    .map(|x| x.series.points.last().map_or(x.series.initial, |p| p.1))
                    .sum();
                assert_eq!(end, *rep.requested.last().unwrap(), "{name}");
                for x in &few {
                    assert!(x.series.points.len() <= 2 * 3 + 1, "{name}: {}", x.role);
                    assert!(x.series.points.windows(2).all(|w| w[0].0 < w[1].0));
                }
            }
        }
    }
}
