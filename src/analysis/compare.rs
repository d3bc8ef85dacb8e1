//! `leakscope compare A B`: the leak finder on two runs side by side (forward-only against
//! training, PP=1 against PP=4, before against after a fix), plus the end-state difference
//! by site, and a guard against a fix that removed the leak by cutting the gradient path.

use std::collections::BTreeMap;

use serde::Serialize;

use super::leaks::{Growth, LeakReport, WindowInfo};
use super::top::TopReport;
use crate::model::{Action, Snapshot};

/// JSON schema name of [`CompareReport`].
pub const SCHEMA: &str = "leakscope.compare/1";

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct Side {
    /// File.
    pub file: String,
    /// Windows used.
    pub windows: WindowInfo,
    /// Bytes allocated by the backward pass (stacks through a `backward` frame or the
    /// autograd engine, or with no frame, as engine-thread allocations are recorded).
    pub backward_bytes: u64,
}

/// A site's growth in one run.
#[derive(Clone, Debug, Serialize)]
pub struct SideGrowth {
    /// Typical bytes per window (0 when the site does not grow in this run).
    pub bytes_per_window: u64,
    /// Kind (`null` when the site does not grow in this run).
    pub kind: Option<&'static str>,
}

/// A site in both runs.
#[derive(Clone, Debug, Serialize)]
pub struct SiteCompare {
    /// The grouping key.
    pub key: String,
    /// The site's frame.
    pub site: Option<super::top::SiteInfo>,
    /// In run A.
    pub a: SideGrowth,
    /// In run B.
    pub b: SideGrowth,
    /// `b.bytes_per_window - a.bytes_per_window`.
    pub difference: i64,
}

/// Live bytes at the end by site, in both runs.
#[derive(Clone, Debug, Serialize)]
pub struct EndCompare {
    /// The grouping key.
    pub key: String,
    /// Bytes and allocations in A.
    pub a_bytes: u64,
    /// Allocations in A.
    pub a_blocks: u64,
    /// Bytes in B.
    pub b_bytes: u64,
    /// Allocations in B.
    pub b_blocks: u64,
    /// `b_bytes - a_bytes`.
    pub difference: i64,
}

/// The `compare` report (`leakscope.compare/1`).
#[derive(Clone, Debug, Serialize)]
pub struct CompareReport {
    /// Schema name.
    pub schema: &'static str,
    /// Run A.
    pub a: Side,
    /// Run B.
    pub b: Side,
    /// Every site that grows in either run, by the larger rate.
    pub sites: Vec<SiteCompare>,
    /// End state by site, by the larger absolute difference.
    pub end_state: Vec<EndCompare>,
    /// What the comparison should make you doubt.
    pub warnings: Vec<String>,
}

/// Bytes allocated by the backward pass in a device's trace.
pub fn backward_bytes(snap: &Snapshot, device: i64) -> u64 {
    let t = snap.trace(device);
    let mut cache: crate::model::fxhash::FastMap<crate::model::StackId, bool> = Default::default();
    let mut total = 0u64;
    for i in 0..t.len() {
        if t.action[i] != Action::ALLOC {
            continue;
        }
        let s = t.stack[i];
        let backward = *cache.entry(s).or_insert_with(|| {
            let frames = snap.stacks.get(s);
            frames.is_empty()
                || frames.iter().any(|&f| {
                    let fr = snap.frames.get(f);
                    let name = snap.strings.get(fr.name).to_ascii_lowercase();
                    let file = snap.strings.get(fr.filename);
                    name.contains("backward")
                        || name.contains("autograd::engine")
                        || file.contains("torch/autograd/")
                })
        });
        if backward {
            total += t.size[i];
        }
    }
    total
}

fn growth(g: Option<&Growth>) -> SideGrowth {
    match g {
        Some(g) => SideGrowth {
            bytes_per_window: g.bytes_per_window,
            kind: Some(g.kind),
        },
        None => SideGrowth {
            bytes_per_window: 0,
            kind: None,
        },
    }
}

/// Puts two runs' leak reports and end states side by side.
#[allow(clippy::too_many_arguments)]
pub fn compare(
    a_file: &str,
    a: &LeakReport,
    a_end: &TopReport,
    a_backward: u64,
    b_file: &str,
    b: &LeakReport,
    b_end: &TopReport,
    b_backward: u64,
) -> CompareReport {
    let all = |r: &LeakReport| -> BTreeMap<String, Growth> {
        r.suspects
            .iter()
            .chain(&r.warmup)
            .map(|g| (g.key.clone(), g.clone()))
            .collect()
    };
    let (ga, gb) = (all(a), all(b));
    let mut keys: Vec<&String> = ga.keys().chain(gb.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut sites: Vec<SiteCompare> = keys
        .into_iter()
        .map(|k| {
            let (x, y) = (ga.get(k), gb.get(k));
            let (sa, sb) = (growth(x), growth(y));
            SiteCompare {
                key: k.clone(),
                site: x.or(y).and_then(|g| g.site.clone()),
                difference: sb.bytes_per_window as i64 - sa.bytes_per_window as i64,
                a: sa,
                b: sb,
            }
        })
        .collect();
    sites.sort_by(|p, q| {
        let m = |s: &SiteCompare| s.a.bytes_per_window.max(s.b.bytes_per_window);
        m(q).cmp(&m(p)).then(p.key.cmp(&q.key))
    });

    let rows = |r: &TopReport| -> BTreeMap<String, (u64, u64)> {
        r.rows
            .iter()
            .map(|x| (x.key.clone(), (x.bytes, x.blocks)))
            .collect()
    };
    let (ea, eb) = (rows(a_end), rows(b_end));
    let mut end_keys: Vec<&String> = ea.keys().chain(eb.keys()).collect();
    end_keys.sort();
    end_keys.dedup();
    let mut end_state: Vec<EndCompare> = end_keys
        .into_iter()
        .map(|k| {
            let (ab, an) = ea.get(k).copied().unwrap_or((0, 0));
            let (bb, bn) = eb.get(k).copied().unwrap_or((0, 0));
            EndCompare {
                key: k.clone(),
                a_bytes: ab,
                a_blocks: an,
                b_bytes: bb,
                b_blocks: bn,
                difference: bb as i64 - ab as i64,
            }
        })
        .collect();
    end_state.sort_by(|p, q| {
        q.difference
            .unsigned_abs()
            .cmp(&p.difference.unsigned_abs())
            .then(p.key.cmp(&q.key))
    });

    let mut warnings = Vec::new();
    let suspect_rate = |r: &LeakReport| r.suspects.iter().map(|g| g.bytes_per_window).sum::<u64>();
    if suspect_rate(a) > 0
        && suspect_rate(b) * 2 < suspect_rate(a)
        && (b_backward as f64) < 0.9 * a_backward as f64
    {
        warnings.push(format!(
            "B's backward pass allocates {:.0}% less than A's while A's growth is gone: if B is the fix, check that it did not cut the gradient path (a misplaced .detach() stops both the leak and the training)",
            100.0 * (1.0 - b_backward as f64 / a_backward.max(1) as f64)
        ));
    }
    if a.windows.count != b.windows.count {
        warnings.push(format!(
            "the runs have different numbers of windows ({} and {}): rates are per window, totals are not comparable",
            a.windows.count, b.windows.count
        ));
    }
    CompareReport {
        schema: SCHEMA,
        a: Side {
            file: a_file.to_string(),
            windows: a.windows.clone(),
            backward_bytes: a_backward,
        },
        b: Side {
            file: b_file.to_string(),
            windows: b.windows.clone(),
            backward_bytes: b_backward,
        },
        sites,
        end_state,
        warnings,
    }
}
