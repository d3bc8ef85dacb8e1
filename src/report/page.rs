//! Everything the HTML report shows, per device: the decimated timeline with its markers,
//! the largest sites over time, the leak finder's suspects with their growth per window,
//! `top` at the peak and at the end, the OOM explanation when the trace has one, and the
//! call tree at the peak for the flamegraph; and the file's summary. The session computes
//! it (`session::report`), `render::html` draws the page from it, and `report --json`
//! writes it out.

use serde::Serialize;

use crate::analysis::allocations::DeviceAllocations;
use crate::analysis::leaks::{self, DeviceLeaks};
use crate::analysis::oom::DeviceOom;
use crate::analysis::point::Point;
use crate::analysis::segments::SegmentTotals;
use crate::analysis::summary::Summary;
use crate::analysis::timeline::{SiteSeries, Timeline};
use crate::analysis::top::DeviceTop;
use crate::analysis::tree::DeviceTree;
use crate::attribute::Site;

/// A marked event on the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Marker {
    /// Event index.
    pub event_index: u32,
    /// Requested bytes after it.
    pub requested_bytes: u64,
    /// Reserved bytes after it.
    pub reserved_bytes: u64,
}

/// The window boundaries drawn on the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct WindowMarks {
    /// How the windows were found (as `leaks` reports it).
    pub source: crate::windows::WindowSource,
    /// Windows in all.
    pub count: u64,
    /// Start events of the windows drawn (all of them up to the report's limit).
    pub starts: Vec<u32>,
    /// Their names, where windows have names.
    pub names: Vec<String>,
}

/// Survivor bytes per window of the first suspects, for the growth chart. Beyond
/// `growth_points` windows, consecutive windows are bucketed and each bucket shows its
/// largest window, so a window that grew is never averaged away.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GrowthChart {
    /// First window of each point.
    pub windows: Vec<u64>,
    /// Windows per point (1 unless bucketed).
    pub windows_per_point: u64,
    /// One line per suspect, in the leak table's order.
    pub lines: Vec<GrowthLine>,
}

/// One suspect's line in [`GrowthChart`].
#[derive(Clone, Debug, Serialize)]
pub struct GrowthLine {
    /// The site.
    pub site: Site,
    /// `leak` or `retained`.
    pub kind: leaks::Kind,
    /// Survivor bytes per point.
    pub bytes: Vec<u64>,
}

/// Everything the report shows.
#[derive(Debug, Serialize)]
pub struct ReportData {
    /// Schema name.
    pub schema: &'static str,
    /// The file (as given).
    pub file: String,
    /// `summary`'s report.
    pub summary: Summary,
    /// Every selected device that has segments or trace events.
    pub devices: Vec<DeviceReport>,
    /// Devices of the file with nothing recorded.
    pub idle_devices: Vec<i64>,
    /// Devices whose trace and final state disagree (see `PerDevice::disagreements`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disagreements: Vec<crate::replay::Consistency>,
}

/// What the report shows of one device.
#[derive(Debug, Serialize)]
pub struct DeviceReport {
    /// The device.
    pub device: i64,
    /// Requested and reserved bytes over the trace.
    pub timeline: Timeline,
    /// The peak of requested bytes (as `top --at peak` resolves it).
    pub peak: Point,
    /// The most bytes reserved at any point of the trace (`peak_reserved`).
    pub peak_reserved_bytes: u64,
    /// Reserved bytes at the peak of requested bytes.
    pub reserved_at_peak_bytes: u64,
    /// `oom` events.
    pub ooms: Vec<Marker>,
    /// Window boundaries.
    pub windows: WindowMarks,
    /// Memory by role over time (every role).
    pub roles: SiteSeries,
    /// Memory by role at the peak.
    pub roles_peak: DeviceTop,
    /// Memory by role at the first OOM, when the trace has one.
    pub roles_oom: Option<DeviceTop>,
    /// The largest sites over time.
    pub sites: SiteSeries,
    /// The leak finder's report (trimmed: see `leak_rows_left_out`; the per-window
    /// series are in `growth`).
    pub leaks: DeviceLeaks,
    /// Survivor bytes per window of the first suspects.
    pub growth: GrowthChart,
    /// Suspects and other growing sites beyond the page's rows (`leaks` lists them all).
    pub leak_rows_left_out: (u64, u64),
    /// `top` at the peak.
    pub top_peak: DeviceTop,
    /// `top` at the end.
    pub top_end: DeviceTop,
    /// The OOM explanation, when the trace has an `oom` event.
    pub oom: Option<DeviceOom>,
    /// Every allocation over the trace, the largest one by one (`leakscope.timeline/1`).
    pub allocations: DeviceAllocations,
    /// The segment map after a few events (evenly spaced, the peak, the first OOM), in
    /// event order, for the state view.
    pub states: Vec<StateMap>,
    /// The call tree at the peak, for the flamegraph (not in the JSON: `tree --json` has it).
    #[serde(skip)]
    pub peak_tree: DeviceTree,
    /// The same with Python frames only (the flame graph's first view).
    #[serde(skip)]
    pub peak_tree_python: DeviceTree,
    /// Memory per `record_function` range (`leakscope phases`).
    pub phases: crate::analysis::phases::DevicePhases,
}

/// A segment map as the page holds it: `segments --json` at one event, in columns (a
/// benchmark-sized map has ten thousand blocks, and the page keeps a dozen maps).
#[derive(Clone, Debug, Serialize)]
pub struct StateMap {
    /// The event it follows.
    pub event_index: u32,
    /// `segments --json`'s totals there.
    pub totals: SegmentTotals,
    /// Per segment: its address and size.
    pub segments: Vec<[u64; 2]>,
    /// Per segment: its active blocks, three numbers each (offset in the segment, size,
    /// 1 when freed but waiting for other streams).
    pub blocks: Vec<Vec<u64>>,
}
