//! `leakscope compare A B`: the leak finder on two runs side by side (forward-only against
//! training, PP=1 against PP=4, before against after a fix), plus the end-state difference
//! by site, and a guard against a fix that removed the leak by cutting the gradient path.

use std::collections::BTreeMap;

use serde::Serialize;

use super::leaks::{DeviceLeaks, Growth, Kind, WindowInfo};
use super::top::DeviceTop;
use crate::attribute::Site;
use crate::model::fxhash::FastMap;
use crate::model::{Action, Snapshot, StackId};

/// One run of a comparison: a device of a file.
#[derive(Clone, Debug, Serialize)]
pub struct Side {
    /// File.
    pub file: String,
    /// Device.
    pub device: i64,
    /// Windows used.
    pub windows: WindowInfo,
    /// Bytes allocated by the backward pass: allocations whose stack runs through the
    /// autograd engine or a backward function, or that have no frame at all (the engine's
    /// own thread, as `stacks="python"` records it).
    pub backward_bytes: u64,
}

/// What one side of a comparison brings: the leak finder's findings, what is live at the
/// end, and the backward pass's bytes.
#[derive(Clone, Copy, Debug)]
pub struct SideInput<'r> {
    /// File.
    pub file: &'r str,
    /// The leak finder on the device.
    pub leaks: &'r DeviceLeaks,
    /// `top` at the end of the device's trace (every site).
    pub end: &'r DeviceTop,
    /// [`backward_bytes`] of the device's trace.
    pub backward_bytes: u64,
}

/// A site's growth in one run.
#[derive(Clone, Debug, Serialize)]
pub struct SideGrowth {
    /// Typical bytes per window (0 when the site does not grow in this run).
    pub bytes_per_window: u64,
    /// Kind (`null` when the site does not grow in this run).
    pub kind: Option<Kind>,
    /// `bytes_per_window` when the kind is a suspect's (leak, retained), else 0: what the
    /// comparison weighs (a site in flight in one run and leaking in the other changed by
    /// the whole leak).
    pub suspect_bytes_per_window: u64,
}

/// A site in both runs.
#[derive(Clone, Debug, Serialize)]
pub struct SiteCompare {
    /// The site.
    pub site: Site,
    /// In run A.
    pub a: SideGrowth,
    /// In run B.
    pub b: SideGrowth,
    /// `b.suspect_bytes_per_window - a.suspect_bytes_per_window`: the change in suspect
    /// growth.
    pub difference: i64,
    /// The kind differs between the runs (`late` in A, `leak` in B).
    pub kind_changed: bool,
}

/// Live bytes at the end by site, in both runs.
#[derive(Clone, Debug, Serialize)]
pub struct EndCompare {
    /// The site.
    pub site: Site,
    /// Bytes in A.
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

/// What the comparison should make you doubt.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CompareWarning {
    /// A's growth is gone in B and so is much of A's backward pass: if B is the fix, it
    /// may have cut the gradient path (a misplaced `.detach()` stops both the leak and
    /// the training).
    GradientPathCut {
        /// How much less B's backward pass allocates than A's, in percent.
        backward_drop_percent: f64,
    },
    /// The runs have different numbers of windows: rates are per window, totals differ.
    WindowCounts {
        /// Windows of A.
        a: u64,
        /// Windows of B.
        b: u64,
    },
}

/// One device of A against one device of B.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceCompare {
    /// Run A.
    pub a: Side,
    /// Run B.
    pub b: Side,
    /// Every site that grows in either run, by the larger rate.
    pub sites: Vec<SiteCompare>,
    /// End state by site, by the larger absolute difference.
    pub end_state: Vec<EndCompare>,
    /// What the comparison should make you doubt.
    pub warnings: Vec<CompareWarning>,
}

/// Whether a stack belongs to the backward pass: a frame of a function named for the
/// backward pass alone (`Tensor.backward`, `torch.autograd.backward`,
/// `_engine_run_backward`, Megatron's `backward_step`; not the schedulers that do both,
/// such as `forward_backward_batch`, and not the rest of `torch/autograd/`, whose
/// `grad_mode.py` wraps every `no_grad` forward), of the C++ autograd engine, or no frame
/// at all (the engine's own thread under `stacks="python"`).
fn is_backward(snap: &Snapshot, s: StackId) -> bool {
    let frames = snap.stacks.get(s);
    frames.is_empty()
        || frames.iter().any(|&f| {
            let name = snap
                .strings
                .get(snap.frames.get(f).name)
                .to_ascii_lowercase();
            name.contains("autograd::engine")
                || (name.contains("backward") && !name.contains("forward"))
        })
}

/// Bytes allocated by the backward pass in device `device`'s trace.
pub fn backward_bytes(snap: &Snapshot, device: i64) -> u64 {
    let t = snap.trace(device);
    let mut cache: FastMap<StackId, bool> = FastMap::default();
    let mut total = 0u64;
    for i in 0..t.len() {
        if t.action[i] == Action::ALLOC
            && *cache
                .entry(t.stack[i])
                .or_insert_with(|| is_backward(snap, t.stack[i]))
        {
            total = total.saturating_add(t.size[i]);
        }
    }
    total
}

fn side_growth(g: Option<&Growth>) -> SideGrowth {
    SideGrowth {
        bytes_per_window: g.map_or(0, |g| g.bytes_per_window),
        kind: g.map(|g| g.kind),
        suspect_bytes_per_window: g
            .filter(|g| g.kind.is_suspect())
            .map_or(0, |g| g.bytes_per_window),
    }
}

fn growth_sites(a: &DeviceLeaks, b: &DeviceLeaks) -> Vec<SiteCompare> {
    let all = |r: &DeviceLeaks| -> BTreeMap<String, Growth> {
        r.suspects
            .iter()
            .chain(&r.not_suspects)
            .map(|g| (g.site.label.clone(), g.clone()))
            .collect()
    };
    let (ga, gb) = (all(a), all(b));
    let mut labels: Vec<&String> = ga.keys().chain(gb.keys()).collect();
    labels.sort();
    labels.dedup();
    let mut sites: Vec<SiteCompare> = labels
        .into_iter()
        .map(|k| {
            let (x, y) = (ga.get(k), gb.get(k));
            let (sa, sb) = (side_growth(x), side_growth(y));
            SiteCompare {
                site: x
                    .or(y)
                    .map_or_else(|| Site::label_only(k), |g| g.site.clone()),
                difference: sb.suspect_bytes_per_window as i64 - sa.suspect_bytes_per_window as i64,
                kind_changed: sa.kind != sb.kind,
                a: sa,
                b: sb,
            }
        })
        .collect();
    // Changes in suspect growth first (a kind that became a leak, a leak fixed), largest
    // first; then the rest by the larger rate.
    sites.sort_by(|p, q| {
        let m = |s: &SiteCompare| s.a.bytes_per_window.max(s.b.bytes_per_window);
        q.difference
            .unsigned_abs()
            .cmp(&p.difference.unsigned_abs())
            .then_with(|| m(q).cmp(&m(p)))
            .then_with(|| p.site.label.cmp(&q.site.label))
    });
    sites
}

fn end_sites(a: &DeviceTop, b: &DeviceTop) -> Vec<EndCompare> {
    let rows = |r: &DeviceTop| -> BTreeMap<String, (Site, u64, u64)> {
        r.rows
            .iter()
            .map(|x| (x.site.label.clone(), (x.site.clone(), x.bytes, x.blocks)))
            .collect()
    };
    let (ea, eb) = (rows(a), rows(b));
    let mut labels: Vec<&String> = ea.keys().chain(eb.keys()).collect();
    labels.sort();
    labels.dedup();
    let mut end: Vec<EndCompare> = labels
        .into_iter()
        .map(|k| {
            let (x, y) = (ea.get(k), eb.get(k));
            let site = x.or(y).map_or_else(|| Site::label_only(k), |r| r.0.clone());
            let (ab, an) = x.map_or((0, 0), |r| (r.1, r.2));
            let (bb, bn) = y.map_or((0, 0), |r| (r.1, r.2));
            EndCompare {
                site,
                a_bytes: ab,
                a_blocks: an,
                b_bytes: bb,
                b_blocks: bn,
                difference: bb as i64 - ab as i64,
            }
        })
        .collect();
    end.sort_by(|p, q| {
        q.difference
            .unsigned_abs()
            .cmp(&p.difference.unsigned_abs())
            .then_with(|| p.site.label.cmp(&q.site.label))
    });
    end
}

fn warnings(a: &SideInput, b: &SideInput) -> Vec<CompareWarning> {
    let mut w = Vec::new();
    let rate = |r: &DeviceLeaks| {
        crate::model::size::sum_sizes(r.suspects.iter().map(|g| g.bytes_per_window))
    };
    let (ra, rb) = (rate(a.leaks), rate(b.leaks));
    if ra > 0
        && rb.saturating_mul(2) < ra
        && (b.backward_bytes as f64) < 0.9 * a.backward_bytes as f64
    {
        w.push(CompareWarning::GradientPathCut {
            backward_drop_percent: 100.0
                * (1.0 - b.backward_bytes as f64 / a.backward_bytes.max(1) as f64),
        });
    }
    let (wa, wb) = (a.leaks.windows.count, b.leaks.windows.count);
    if wa != wb {
        w.push(CompareWarning::WindowCounts { a: wa, b: wb });
    }
    w
}

/// Puts one device of each run side by side.
pub fn compare(a: SideInput, b: SideInput) -> DeviceCompare {
    let side = |s: &SideInput| Side {
        file: s.file.to_string(),
        device: s.leaks.device,
        windows: s.leaks.windows.clone(),
        backward_bytes: s.backward_bytes,
    };
    DeviceCompare {
        a: side(&a),
        b: side(&b),
        sites: growth_sites(a.leaks, b.leaks),
        end_state: end_sites(a.end, b.end),
        warnings: warnings(&a, &b),
    }
}
