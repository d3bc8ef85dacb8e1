//! The reports a session gives, one per command: every device's findings, with the
//! versioned schema name their JSON carries (docs/schemas.md).

use serde::Serialize;

use crate::analysis::At;
use crate::analysis::leaks::DeviceLeaks;
use crate::analysis::oom::DeviceOom;
use crate::analysis::point::PointError;
use crate::analysis::segments::DeviceSegments;
use crate::analysis::top::DeviceTop;
use crate::analysis::tree::DeviceTree;
use crate::attribute::GroupBy;
use crate::windows::Windows;

/// A device the point asked for does not exist on, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Unresolved {
    /// The device.
    pub device: i64,
    /// Why.
    #[serde(serialize_with = "as_message")]
    pub reason: PointError,
}

fn as_message<S: serde::Serializer>(e: &PointError, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(e)
}

/// `leakscope leaks` (`leakscope.leaks/2`).
#[derive(Clone, Debug, Serialize)]
pub struct LeaksReport {
    /// Schema name.
    pub schema: &'static str,
    /// The file.
    pub file: String,
    /// What sites are grouped by.
    pub by: GroupBy,
    /// Every selected device that has segments or trace events.
    pub devices: Vec<DeviceLeaks>,
    /// Devices of the file with nothing recorded.
    pub idle_devices: Vec<i64>,
}

/// `leakscope windows` (`leakscope.windows/1`).
#[derive(Clone, Debug, Serialize)]
pub struct WindowsReport {
    /// Schema name.
    pub schema: &'static str,
    /// The file.
    pub file: String,
    /// Every selected device's windows.
    pub devices: Vec<Windows>,
    /// Devices of the file with nothing recorded.
    pub idle_devices: Vec<i64>,
}

/// `leakscope top` (`leakscope.top/2`).
#[derive(Clone, Debug, Serialize)]
pub struct TopReport {
    /// Schema name.
    pub schema: &'static str,
    /// The file.
    pub file: String,
    /// The point asked for.
    pub at: At,
    /// What sites are grouped by.
    pub by: GroupBy,
    /// Every selected device where the point exists.
    pub devices: Vec<DeviceTop>,
    /// Selected devices where it does not.
    pub unresolved: Vec<Unresolved>,
    /// Devices of the file with nothing recorded.
    pub idle_devices: Vec<i64>,
}

/// `leakscope tree` (`leakscope.tree/2`); its JSON is written by `render::json::tree`,
/// without recursion however deep the stacks.
#[derive(Clone, Debug)]
pub struct TreeReport {
    /// Schema name.
    pub schema: &'static str,
    /// The file.
    pub file: String,
    /// The point asked for.
    pub at: At,
    /// Every selected device where the point exists.
    pub devices: Vec<DeviceTree>,
    /// Selected devices where it does not.
    pub unresolved: Vec<Unresolved>,
    /// Devices of the file with nothing recorded.
    pub idle_devices: Vec<i64>,
}

/// `leakscope segments` (`leakscope.segments/2`).
#[derive(Clone, Debug, Serialize)]
pub struct SegmentsReport {
    /// Schema name.
    pub schema: &'static str,
    /// The file.
    pub file: String,
    /// The point asked for.
    pub at: At,
    /// Every selected device where the point exists.
    pub devices: Vec<DeviceSegments>,
    /// Selected devices where it does not.
    pub unresolved: Vec<Unresolved>,
    /// Devices of the file with nothing recorded.
    pub idle_devices: Vec<i64>,
}

/// `leakscope oom` (`leakscope.oom/2`): the devices with an `oom` event, or every
/// selected device's end state when none has one.
#[derive(Clone, Debug, Serialize)]
pub struct OomReport {
    /// Schema name.
    pub schema: &'static str,
    /// The file.
    pub file: String,
    /// One explanation per device.
    pub devices: Vec<DeviceOom>,
    /// Devices of the file with nothing recorded.
    pub idle_devices: Vec<i64>,
}

/// Schema names, in one place.
pub mod schema {
    /// [`super::LeaksReport`].
    pub const LEAKS: &str = "leakscope.leaks/2";
    /// [`super::WindowsReport`].
    pub const WINDOWS: &str = "leakscope.windows/1";
    /// [`super::TopReport`].
    pub const TOP: &str = "leakscope.top/2";
    /// [`super::TreeReport`].
    pub const TREE: &str = "leakscope.tree/2";
    /// [`super::SegmentsReport`].
    pub const SEGMENTS: &str = "leakscope.segments/2";
    /// [`super::OomReport`].
    pub const OOM: &str = "leakscope.oom/2";
    /// `session::compare::CompareReport`.
    pub const COMPARE: &str = "leakscope.compare/2";
    /// `session::check::CheckReport`.
    pub const CHECK: &str = "leakscope.check/2";
    /// `session::ranks::RanksReport`.
    pub const RANKS: &str = "leakscope.ranks/2";
    /// `session::report::ReportData`.
    pub const REPORT: &str = "leakscope.report/2";
    /// `analysis::summary::Summary` (its shape did not change with devices).
    pub const SUMMARY: &str = crate::analysis::summary::SCHEMA;
}
