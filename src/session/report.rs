//! Everything the HTML report shows, computed once per device: the decimated timeline
//! with its markers, the largest sites over time, the leak finder's suspects with their
//! growth per window, `top` at the peak and at the end, the OOM explanation when the trace
//! has one, and the call tree at the peak for the flamegraph; and the file's summary. The
//! value is a `report::ReportData` (data only, in `src/report/page.rs`); the page itself
//! is drawn by `render::html` from it (also written out by `report --json`).

use super::run::DeviceRun;
use crate::analysis::allocations::allocations;
use crate::analysis::leaks::DeviceLeaks;
use crate::analysis::point::{At, point_after};
use crate::analysis::segments::{DeviceSegments, segments};
use crate::analysis::timeline::{site_series, timeline};
use crate::analysis::top;
use crate::analysis::tree;
use crate::attribute::{Attributor, Classification, GroupBy};
use crate::replay::AllocatorState;
use crate::report::{DeviceReport, GrowthChart, GrowthLine, Marker, StateMap, WindowMarks};
use crate::windows::Windows;

/// How much the report keeps.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReportOptions {
    /// Buckets of the timeline (up to four points each).
    pub timeline_buckets: usize,
    /// Sites drawn separately in the stacked area.
    pub top_sites: usize,
    /// Samples of the stacked area.
    pub site_samples: usize,
    /// Rows of the `top` tables.
    pub top_rows: usize,
    /// Window boundaries drawn on the timeline at most (evenly thinned beyond).
    pub max_marked_windows: usize,
    /// Suspects drawn in the growth chart.
    pub growth_lines: usize,
    /// Points of the growth chart at most (windows are bucketed beyond).
    pub growth_points: usize,
    /// Rows of the leak tables kept (suspects, and other growing sites).
    pub leak_rows: usize,
    /// Allocations the timeline draws one by one per device (the rest summed).
    pub max_allocations: usize,
    /// Evenly spaced events whose segment map the page holds (the peak's and the first
    /// OOM's too), for the state view.
    pub state_points: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            timeline_buckets: 2000,
            top_sites: 8,
            site_samples: 600,
            top_rows: 25,
            max_marked_windows: 500,
            growth_lines: 9,
            growth_points: 2000,
            leak_rows: 200,
            max_allocations: crate::analysis::allocations::DEFAULT_MAX_ALLOCATIONS,
            state_points: 8,
        }
    }
}

fn growth_chart(report: &DeviceLeaks, opts: &ReportOptions) -> GrowthChart {
    let n = report
        .suspects
        .first()
        .map_or(0, |g| g.survivors_per_window.len());
    let per = n.div_ceil(opts.growth_points.max(1)).max(1);
    GrowthChart {
        windows: (0..n).step_by(per).map(|w| w as u64).collect(),
        windows_per_point: per as u64,
        lines: report
            .suspects
            .iter()
            .take(opts.growth_lines)
            .map(|g| GrowthLine {
                site: g.site.clone(),
                kind: g.kind,
                bytes: bucket_max(&g.survivors_per_window, per),
            })
            .collect(),
    }
}

/// The largest value of each run of `per` consecutive values.
fn bucket_max(v: &[u64], per: usize) -> Vec<u64> {
    v.chunks(per.max(1))
        .map(|c| c.iter().copied().max().unwrap_or(0))
        .collect()
}

/// Keeps the page's size bounded whatever the trace: per-window series are in the growth
/// chart (bucketed), and the other growing sites keep no stacks or addresses (their rows
/// show only the site). Counts of what was left out are kept.
fn trim_for_page(report: &mut DeviceLeaks, rows: usize) -> (u64, u64) {
    let dropped = (
        report.suspects.len().saturating_sub(rows) as u64,
        report.not_suspects.len().saturating_sub(rows) as u64,
    );
    report.suspects.truncate(rows);
    report.not_suspects.truncate(rows);
    for g in &mut report.suspects {
        g.survivors_per_window = Vec::new();
    }
    for g in &mut report.not_suspects {
        g.survivors_per_window = Vec::new();
        g.stack = Vec::new();
        g.example_addresses = Vec::new();
    }
    dropped
}

fn window_marks(windows: &Windows, opts: &ReportOptions) -> WindowMarks {
    let step = windows
        .len()
        .div_ceil(opts.max_marked_windows.max(1))
        .max(1);
    let picked: Vec<usize> = (0..windows.len()).step_by(step).collect();
    WindowMarks {
        source: windows.source,
        count: windows.len() as u64,
        starts: picked.iter().map(|&w| windows.starts[w]).collect(),
        names: picked
            .iter()
            .filter_map(|&w| windows.names.get(w).cloned())
            .collect(),
    }
}

/// The report of one device.
pub(crate) fn device_report(
    r: &mut DeviceRun,
    opts: &ReportOptions,
    python: &Classification,
) -> DeviceReport {
    let mut leaks = r.find_leaks();
    let marks = window_marks(r.windows(), opts);
    let growth = growth_chart(&leaks, opts);
    let leak_rows_left_out = trim_for_page(&mut leaks, opts.leak_rows);
    let (peak, end) = r.peak_and_end();
    let replay = &r.replay;
    let marker = |i: u32| Marker {
        event_index: i,
        requested_bytes: replay.requested.get(i as usize).copied().unwrap_or(0),
        reserved_bytes: replay.reserved.get(i as usize).copied().unwrap_or(0),
    };
    let reserved_at_peak_bytes = peak
        .event_index
        .map_or(replay.initial_reserved, |i| marker(i).reserved_bytes);
    let peak_reserved_bytes = replay.peak_reserved();
    let ooms = replay.ooms.iter().map(|&i| marker(i)).collect();
    let top_peak = top::top(replay, peak.clone(), &mut r.attr, opts.top_rows);
    let top_end = top::top(replay, end, &mut r.attr, opts.top_rows);
    let peak_tree = tree::tree(replay, peak.clone(), &mut r.attr);
    let mut python_attr = Attributor::with(r.snapshot(), GroupBy::Site, python);
    let peak_tree_python = tree::tree(replay, peak.clone(), &mut python_attr);
    let sites = site_series(replay, &mut r.attr, opts.top_sites, opts.site_samples);
    let mut by_role = r.attr.by_role();
    let every_role = by_role.roles().map_or(0, |m| m.rules().names().len());
    let roles = site_series(replay, &mut by_role, every_role, opts.site_samples);
    let roles_peak = top::top(replay, peak.clone(), &mut by_role, usize::MAX);
    let roles_oom = replay.ooms.first().map(|&i| {
        let at = point_after(r.snapshot(), replay, At::Oom, Some(i));
        top::top(replay, at, &mut by_role, usize::MAX)
    });
    let timeline = timeline(replay, opts.timeline_buckets);
    let states = state_events(replay.len(), peak.event_index, replay.ooms.first(), opts)
        .into_iter()
        .map(|e| {
            let at = point_after(r.snapshot(), replay, At::Event(e), Some(e));
            StateMap::of(
                e,
                &segments(
                    r.device(),
                    at,
                    &AllocatorState::after(&r.view, replay, Some(e)),
                ),
            )
        })
        .collect();
    let (device, trace) = (r.device(), r.view.trace);
    let allocations = allocations(device, trace, replay, &mut r.attr, opts.max_allocations);
    let phases = crate::analysis::phases::phases(r.snapshot(), device, replay);
    let oom = (!r.replay.ooms.is_empty()).then(|| r.explain_oom());
    DeviceReport {
        device: r.device(),
        timeline,
        peak,
        peak_reserved_bytes,
        reserved_at_peak_bytes,
        ooms,
        windows: marks,
        roles,
        roles_peak,
        roles_oom,
        sites,
        leaks,
        growth,
        leak_rows_left_out,
        top_peak,
        top_end,
        oom,
        allocations,
        states,
        peak_tree,
        peak_tree_python,
        phases,
    }
}

impl StateMap {
    fn of(event_index: u32, s: &DeviceSegments) -> StateMap {
        StateMap {
            event_index,
            totals: s.totals.clone(),
            segments: s
                .segments
                .iter()
                .map(|g| [g.address, g.total_size])
                .collect(),
            blocks: s
                .segments
                .iter()
                .map(|g| {
                    g.blocks
                        .iter()
                        .filter(|b| b.active)
                        .flat_map(|b| {
                            [
                                b.address.saturating_sub(g.address),
                                b.size,
                                u64::from(b.pending_free),
                            ]
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

/// The events whose segment map the page holds: `opts.state_points` evenly spaced over
/// `n` events (the last among them), the peak's and the first OOM's.
fn state_events(n: usize, peak: Option<u32>, oom: Option<&u32>, opts: &ReportOptions) -> Vec<u32> {
    if n == 0 {
        return Vec::new();
    }
    let k = opts.state_points.max(1);
    let mut v: Vec<u32> = (1..=k).map(|i| ((n * i).div_ceil(k) - 1) as u32).collect();
    v.extend(peak);
    v.extend(oom.copied());
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::bucket_max;

    #[test]
    fn buckets_keep_their_largest_window() {
        let v = [0, 5, 0, 0, 7, 1, 0];
        assert_eq!(bucket_max(&v, 1), v.to_vec());
        assert_eq!(bucket_max(&v, 2), vec![5, 0, 7, 0]);
        assert_eq!(bucket_max(&v, 3), vec![5, 7, 0]);
        assert_eq!(bucket_max(&v, 10), vec![7]);
        assert!(bucket_max(&[], 4).is_empty());
    }
}
