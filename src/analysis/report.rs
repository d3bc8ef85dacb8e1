//! Everything the HTML report shows, computed once: the summary, the decimated timeline
//! with its markers, the largest sites over time, the leak finder's suspects with their
//! growth per window, `top` at the peak and at the end, the OOM explanation when the trace
//! has one, and the call tree at the peak for the flamegraph. The page itself is drawn by
//! `render::html` from this value (also written out by `report --json`).

use serde::Serialize;

use super::timeline::{SiteSeries, Timeline, site_series, timeline};
use super::{leaks, oom, summary, top, tree};
use crate::attribute::Attributor;
use crate::model::Snapshot;
use crate::replay::Replay;
use crate::windows::Windows;

/// Schema name of [`ReportData`].
pub const SCHEMA: &str = "leakscope.report/1";

/// How much the report keeps.
#[derive(Clone, Debug)]
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
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            timeline_buckets: 2000,
            top_sites: 8,
            site_samples: 600,
            top_rows: 25,
            max_marked_windows: 500,
        }
    }
}

/// A marked event on the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Marker {
    /// Event index.
    pub event_index: u32,
    /// Live bytes after it.
    pub live_bytes: u64,
    /// Reserved bytes after it.
    pub reserved_bytes: u64,
}

/// The window boundaries drawn on the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct WindowMarks {
    /// How the windows were found (as `leaks` reports it).
    pub source: String,
    /// Windows in all.
    pub count: u64,
    /// Start events of the windows drawn (all of them up to the report's limit).
    pub starts: Vec<u32>,
    /// Their names, where windows have names.
    pub names: Vec<String>,
}

/// Everything the report shows.
#[derive(Debug, Serialize)]
pub struct ReportData {
    /// Schema name.
    pub schema: &'static str,
    /// The file (as given).
    pub file: String,
    /// The device the trace views are of.
    pub device: i64,
    /// `summary`'s report.
    pub summary: summary::Summary,
    /// Live and reserved bytes over the trace.
    pub timeline: Timeline,
    /// The peak of live bytes (as `top --at peak` resolves it).
    pub peak: top::Point,
    /// Reserved bytes at the peak's event.
    pub peak_reserved_bytes: u64,
    /// `oom` events.
    pub ooms: Vec<Marker>,
    /// Window boundaries.
    pub windows: WindowMarks,
    /// The largest sites over time.
    pub sites: SiteSeries,
    /// The leak finder's report.
    pub leaks: leaks::LeakReport,
    /// `top` at the peak.
    pub top_peak: top::TopReport,
    /// `top` at the end.
    pub top_end: top::TopReport,
    /// The OOM explanation, when the trace has an `oom` event.
    pub oom: Option<oom::OomReport>,
    /// The call tree at the peak, for the flamegraph (not in the JSON: `tree --json` has it).
    #[serde(skip)]
    pub peak_tree: tree::TreeReport,
}

/// Computes the report of device `device` of `snap`, whose replay is `replay`, with
/// `windows` for the leak finder.
pub fn report(
    snap: &Snapshot,
    file: &str,
    replay: &Replay,
    windows: &Windows,
    attr: &mut Attributor,
    opts: &ReportOptions,
) -> ReportData {
    let device = replay.device;
    let summary = summary::summarize(snap, file);
    let leaks = leaks::leaks(replay, windows, attr, &leaks::LeakOptions::default());
    let peak =
        top::resolve(snap, replay, top::At::Peak).unwrap_or_else(|_| unreachable_point(replay));
    let end =
        top::resolve(snap, replay, top::At::End).unwrap_or_else(|_| unreachable_point(replay));
    let top_peak = top::top(replay, peak.clone(), attr, opts.top_rows);
    let top_end = top::top(replay, end, attr, opts.top_rows);
    let peak_tree = tree::tree(replay, peak.clone(), attr);
    let oom = if replay.ooms.is_empty() {
        None
    } else {
        snap.devices()
            .iter()
            .find(|d| d.device == device)
            .map(|dev| {
                let before = oom::windows_before(windows, replay);
                let lr = leaks::leaks(replay, &before, attr, &leaks::LeakOptions::default());
                oom::explain(snap, dev, replay, attr, &lr)
            })
    };
    let marker = |i: u32| Marker {
        event_index: i,
        live_bytes: replay.live.get(i as usize).copied().unwrap_or(0),
        reserved_bytes: replay.reserved.get(i as usize).copied().unwrap_or(0),
    };
    let step = windows
        .len()
        .div_ceil(opts.max_marked_windows.max(1))
        .max(1);
    let picked: Vec<usize> = (0..windows.len()).step_by(step).collect();
    ReportData {
        schema: SCHEMA,
        file: file.to_string(),
        device,
        summary,
        timeline: timeline(replay, opts.timeline_buckets),
        peak_reserved_bytes: peak
            .event_index
            .map_or(replay.initial_reserved, |i| marker(i).reserved_bytes),
        peak,
        ooms: replay.ooms.iter().map(|&i| marker(i)).collect(),
        windows: WindowMarks {
            source: windows.source.clone(),
            count: windows.len() as u64,
            starts: picked.iter().map(|&w| windows.starts[w]).collect(),
            names: picked
                .iter()
                .filter_map(|&w| windows.names.get(w).cloned())
                .collect(),
        },
        sites: site_series(replay, attr, opts.top_sites, opts.site_samples),
        leaks,
        top_peak,
        top_end,
        oom,
        peak_tree,
    }
}

/// `resolve` fails only for points given by the user (an event past the end); the peak and
/// the end always resolve. Kept total rather than panicking all the same.
fn unreachable_point(replay: &Replay) -> top::Point {
    top::Point {
        kind: "end",
        event_index: None,
        time_us: None,
        live_bytes: replay.initial_live,
    }
}
