//! Memory by role over a device's trace: each role's live bytes after every event
//! (decimated as the other counters are) and its most bytes at any point (what a per-role
//! budget limits).

use super::counters::{Extremes, Series};
use crate::attribute::Attributor;
use crate::replay::{Lifetime, Replay};

use super::top::RoleBytes;

/// One role's live bytes over a device's trace.
#[derive(Clone, Debug)]
pub struct RoleSeries {
    /// The role's name.
    pub role: String,
    /// The most bytes it held at once.
    pub peak: u64,
    /// Its live requested bytes, decimated as the other counters are (the extremes of each
    /// bucket of events kept), and exact after the last event.
    pub series: Series,
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
pub fn role_series(replay: &Replay, attr: &Attributor, max_buckets: usize) -> Vec<RoleSeries> {
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

/// Each role's most live bytes at any point (before the first event or after any), roles
/// that never hold memory left out, in role order.
pub fn peaks(replay: &Replay, attr: &Attributor) -> Vec<RoleBytes> {
    // The peaks do not depend on the decimation: the fewest buckets do.
    role_series(replay, attr, 2)
        .into_iter()
        .filter(|s| s.peak > 0)
        .map(|s| RoleBytes {
            role: s.role,
            bytes: s.peak,
        })
        .collect()
}
