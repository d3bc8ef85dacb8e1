//! The reports over a file's devices, one per command: every device's findings, with the
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

/// A report over a file's devices, the shape every per-device command returns: the
/// selected devices' findings, and the file's devices with nothing recorded.
///
/// ```
/// use leakscope::session::{Options, Session};
/// let s = Session::open("fixtures/encodings/empty_traces.pickle", Default::default())?;
/// let r = s.leaks(&Options::default())?;
/// assert!(r.devices.is_empty());
/// assert_eq!(r.idle_devices, [0, 1, 2, 3]);
/// # Ok::<(), leakscope::session::SessionError>(())
/// ```
#[derive(Clone, Debug, Serialize)]
pub struct PerDevice<T> {
    /// Schema name.
    pub schema: &'static str,
    /// The file.
    pub file: String,
    /// The point asked for (`top`, `tree`, `segments`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<At>,
    /// What sites are grouped by (`leaks`, `top`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<GroupBy>,
    /// Every selected device that has segments or trace events (where the point asked
    /// for exists).
    pub devices: Vec<T>,
    /// Selected devices where the point asked for does not exist, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unresolved: Vec<Unresolved>,
    /// Devices of the file with nothing recorded.
    pub idle_devices: Vec<i64>,
    /// Devices whose trace and final state disagree, or whose input describes what no
    /// allocator does: what, counted (figures near it are approximate).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disagreements: Vec<crate::replay::Consistency>,
}

/// `leakscope leaks` (`leakscope.leaks/8`).
pub type LeaksReport = PerDevice<DeviceLeaks>;
/// `leakscope windows` (`leakscope.windows/4`).
pub type WindowsReport = PerDevice<Windows>;
/// `leakscope phases` (`leakscope.phases/1`).
pub type PhasesReport = PerDevice<crate::analysis::phases::DevicePhases>;
/// `leakscope top` (`leakscope.top/4`).
pub type TopReport = PerDevice<DeviceTop>;
/// `leakscope tree` (`leakscope.tree/4`); its JSON is written by `render::json::tree`,
/// without recursion however deep the stacks.
pub type TreeReport = PerDevice<DeviceTree>;
/// `leakscope segments` (`leakscope.segments/3`).
pub type SegmentsReport = PerDevice<DeviceSegments>;
/// `leakscope oom` (`leakscope.oom/5`): the devices with an `oom` event, or every
/// selected device's end state when none has one.
pub type OomReport = PerDevice<DeviceOom>;

/// `leakscope timeline` (`leakscope.timeline/1`): every allocation of each device, the
/// largest drawn one by one.
pub type TimelineReport = PerDevice<crate::analysis::allocations::DeviceAllocations>;
