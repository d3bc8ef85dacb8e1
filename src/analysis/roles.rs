//! Memory by role over a device's trace: the bytes of each role after every event, and
//! each role's most bytes at any point (what a per-role budget limits).

use crate::attribute::Attributor;
use crate::attribute::roles::RoleId;
use crate::replay::Replay;

use super::top::RoleBytes;

/// Live bytes of each role after every event: `series[r][i]` for role id `r` after event
/// `i`, and `initial[r]` before the first event.
#[derive(Clone, Debug, Default)]
pub struct RoleSeries {
    /// Role names, by role id.
    pub names: Vec<String>,
    /// Before the first event, per role.
    pub initial: Vec<u64>,
    /// After each event, per role.
    pub series: Vec<Vec<u64>>,
}

/// Walks `replay`'s events with the live bytes of each role: `visit(None, ..)` before the
/// first event, then `visit(Some(i), ..)` after each. Returns the role names.
fn sweep(
    replay: &Replay,
    attr: &Attributor,
    mut visit: impl FnMut(Option<u32>, &[u64]),
) -> Vec<String> {
    let Some(map) = attr.roles() else {
        return Vec::new();
    };
    let names: Vec<String> = map.rules().names().to_vec();
    let n = replay.len();
    let k = names.len();
    // Births and deaths as (event, role, signed bytes), in event order.
    let mut changes: Vec<(u32, u8, i128)> = Vec::with_capacity(replay.lifetimes.len() * 2);
    let mut cur = vec![0u64; k];
    for (i, l) in replay.lifetimes.iter().enumerate() {
        let r = map.role(i).0;
        if r as usize >= k {
            continue;
        }
        match l.first_alive() {
            None => cur[r as usize] = cur[r as usize].saturating_add(l.bytes),
            Some(a) if (a as usize) < n => changes.push((a, r, l.bytes as i128)),
            Some(_) => continue,
        }
        if let Some(f) = l.freed.filter(|&f| (f as usize) < n) {
            changes.push((f, r, -(l.bytes as i128)));
        }
    }
    changes.sort_unstable_by_key(|c| c.0);
    visit(None, &cur);
    let mut c = 0;
    for i in 0..n as u32 {
        while let Some(&(e, r, b)) = changes.get(c)
            && e == i
        {
            let v = cur[r as usize] as i128 + b;
            cur[r as usize] = v.clamp(0, u64::MAX as i128) as u64;
            c += 1;
        }
        visit(Some(i), &cur);
    }
    names
}

/// The live bytes of each role after every event of `replay` (roles as `attr` has them;
/// allocations `--focus` leaves out are counted too: a role's total is the device's).
pub fn series(replay: &Replay, attr: &Attributor) -> RoleSeries {
    let mut initial = Vec::new();
    let mut series: Vec<Vec<u64>> = Vec::new();
    let names = sweep(replay, attr, |i, cur| match i {
        None => {
            initial = cur.to_vec();
            series = vec![Vec::with_capacity(replay.len()); cur.len()];
        }
        Some(_) => {
            for (s, &b) in series.iter_mut().zip(cur) {
                s.push(b);
            }
        }
    });
    RoleSeries {
        names,
        initial,
        series,
    }
}

/// Each role's most live bytes at any point (before the first event or after any), roles
/// that never hold memory left out, in role order.
pub fn peaks(replay: &Replay, attr: &Attributor) -> Vec<RoleBytes> {
    let mut most: Vec<u64> = Vec::new();
    let names = sweep(replay, attr, |_, cur| {
        most.resize(cur.len(), 0);
        for (m, &b) in most.iter_mut().zip(cur) {
            *m = (*m).max(b);
        }
    });
    names
        .into_iter()
        .zip(most)
        .filter(|(_, b)| *b > 0)
        .map(|(role, bytes)| RoleBytes { role, bytes })
        .collect()
}

impl RoleSeries {
    /// The bytes of role `r` after event `i` (`None`: before the first event).
    pub fn at(&self, r: RoleId, i: Option<u32>) -> u64 {
        let r = r.0 as usize;
        match i {
            None => self.initial.get(r).copied().unwrap_or(0),
            Some(i) => self
                .series
                .get(r)
                .and_then(|s| s.get(i as usize))
                .copied()
                .unwrap_or(0),
        }
    }
}
