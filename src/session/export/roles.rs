//! Roles for the exports: the role of each trace event (the `role` column of
//! `events.parquet`), each role's live bytes over the trace (Perfetto's role counters),
//! and the role of each survivor (pprof's `role` label of the growth profile).
//!
//! Every figure reads the roles the device's [`Attributor`] was given
//! ([`Attributor::role`], by lifetime index) and the replay's lifetimes; nothing here
//! decides a role.

use crate::analysis::counters::{Extremes, Series};
use crate::attribute::Attributor;
use crate::model::Trace;
use crate::replay::{Lifetime, Origin, Replay};

/// An event of no allocation (a segment event, an OOM, a stray `free_requested`) in
/// [`event_roles`].
pub(crate) use crate::render::parquet::events::NO_ROLE;

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

/// One role's live bytes over a device's trace.
#[derive(Clone, Debug)]
pub(crate) struct RoleSeries {
    /// The role's name.
    pub(crate) role: String,
    /// The most bytes it held at once.
    pub(crate) peak: u64,
    /// Its live requested bytes, decimated as the other counters are (the extremes of each
    /// bucket of events kept), and exact after the last event.
    pub(crate) series: Series,
}

/// Events at which a lifetime's bytes start or stop counting, within the trace (`n`
/// events): `(born, freed)`, `None` where outside it. `born` is `None` also for what
/// is alive before the first event (counted in the initial value instead).
fn span(l: &Lifetime, n: usize) -> Option<(Option<u32>, Option<u32>)> {
    let inside = |e: u32| (e as usize) < n;
    let born = match l.first_alive() {
        Some(b) if !inside(b) => return None, // born after the last event
        b => b,
    };
    Some((born, l.freed.filter(|&f| inside(f))))
}

/// Each role's live (requested) bytes over `replay`, for the roles that hold memory at
/// some point, in role order (built-in roles first). Each series keeps at most two points
/// per bucket of events (at most `max_buckets - 1` buckets) and one more after the last
/// event, so its last value is the role's bytes at the end. At every event the roles add
/// up to the replay's live bytes: every allocation has a role (`--focus` leaves none out).
pub(crate) fn role_series(
    replay: &Replay,
    attr: &Attributor,
    max_buckets: usize,
) -> Vec<RoleSeries> {
    let n = replay.len();
    let names: Vec<String> = match attr.roles() {
        Some(m) => m.rules().names().to_vec(),
        None => vec![crate::attribute::roles::Role::Unknown.name().to_string()],
    };
    let nroles = names.len();
    let role_of = |i: usize| (attr.role(i).0 as usize).min(nroles - 1);
    // Per role: bytes before the first event; whether it ever holds memory.
    let mut initial = vec![0i128; nroles];
    let mut used = vec![false; nroles];
    // The changes by event, counted then placed (event-ordered without a sort).
    let mut offsets = vec![0u32; n + 1];
    for l in &replay.lifetimes {
        let Some((born, freed)) = span(l, n) else {
            continue;
        };
        for e in [born, freed].into_iter().flatten() {
            offsets[e as usize + 1] += 1;
        }
    }
    for i in 0..n {
        offsets[i + 1] += offsets[i];
    }
    let mut fill: Vec<u32> = offsets[..n].to_vec();
    let mut changes: Vec<(u16, i64)> = vec![(0, 0); offsets[n] as usize];
    for (i, l) in replay.lifetimes.iter().enumerate() {
        let Some((born, freed)) = span(l, n) else {
            continue;
        };
        let r = role_of(i);
        let bytes = l.bytes.min(i64::MAX as u64) as i64;
        if l.bytes > 0 {
            used[r] = true;
        }
        match born {
            None => initial[r] += i128::from(bytes),
            Some(b) => {
                let k = &mut fill[b as usize];
                changes[*k as usize] = (r as u16, bytes);
                *k += 1;
            }
        }
        if let Some(f) = freed {
            let k = &mut fill[f as usize];
            changes[*k as usize] = (r as u16, -bytes);
            *k += 1;
        }
    }
    let clamp = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
    let mut now = initial.clone();
    let firsts: Vec<u64> = initial.iter().map(|&v| clamp(v)).collect();
    let mut peak = firsts.clone();
    let mut ext: Vec<Extremes> = firsts.iter().map(|&v| Extremes::new(v)).collect();
    let mut out: Vec<Vec<(u32, u64)>> = vec![Vec::new(); nroles];
    // One bucket fewer than allowed: room for the point after the last event.
    let per = n.div_ceil(max_buckets.saturating_sub(1).max(1)).max(1);
    for i in 0..n {
        let ev = i as u32;
        let (a, b) = (offsets[i] as usize, offsets[i + 1] as usize);
        for &(r, d) in &changes[a..b] {
            now[r as usize] += i128::from(d);
        }
        if i % per == 0 {
            if i > 0 {
                for (x, o) in ext.iter_mut().zip(&mut out) {
                    x.flush(o);
                }
            }
            for (r, x) in ext.iter_mut().enumerate() {
                x.start(ev, clamp(now[r]));
            }
        } else {
            for &(r, _) in &changes[a..b] {
                let r = r as usize;
                ext[r].see(ev, clamp(now[r]));
            }
        }
        for &(r, _) in &changes[a..b] {
            let r = r as usize;
            peak[r] = peak[r].max(clamp(now[r]));
        }
    }
    if n > 0 {
        for (r, (x, o)) in ext.iter_mut().zip(&mut out).enumerate() {
            x.flush(o);
            // The end exactly: the last bucket's extremes need not include its last event.
            let end = clamp(now[r]);
            if x.last != end {
                o.push((n as u32 - 1, end));
            }
        }
    }
    names
        .into_iter()
        .zip(firsts)
        .zip(out)
        .zip(peak)
        .enumerate()
        .filter(|(r, _)| used[*r])
        .map(|(_, (((role, initial), points), peak))| RoleSeries {
            role,
            peak,
            series: Series { initial, points },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
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
