//! `compare`'s reports: two runs side by side device by device (`compare A B`), at one
//! point (`compare A B --at`), and two run directories step by step.

use serde::Serialize;

use crate::analysis::compare::DeviceCompare;
use crate::analysis::point_diff::DevicePointDiff;

/// A device of one run with no partner in the other.
#[derive(Clone, Debug, Serialize)]
pub struct Unpaired {
    /// `a` or `b`.
    pub run: &'static str,
    /// The device.
    pub device: i64,
}

/// `leakscope compare` (`leakscope.compare/3`).
#[derive(Clone, Debug, Serialize)]
pub struct CompareReport {
    /// Schema name.
    pub schema: &'static str,
    /// Run A's file.
    pub a: String,
    /// Run B's file.
    pub b: String,
    /// Each device of A against its partner in B: the same index, or the one active
    /// device of each when both have one (rank files name their own GPU).
    pub devices: Vec<DeviceCompare>,
    /// Devices with no partner.
    pub unpaired: Vec<Unpaired>,
}

/// `compare A B --at POINT` (`leakscope.compare_at/2`): the two runs at that point, site by
/// site.
#[derive(Clone, Debug, Serialize)]
pub struct CompareAtReport {
    /// Schema name.
    pub schema: &'static str,
    /// Run A's file.
    pub a: String,
    /// Run B's file.
    pub b: String,
    /// The point compared.
    pub at: String,
    /// Each device of A against its partner in B.
    pub devices: Vec<DevicePointDiff>,
    /// Devices with no partner, or where the point does not exist.
    pub unpaired: Vec<Unpaired>,
}

/// One rank and step of both runs, compared at the point.
#[derive(Clone, Debug, Serialize)]
pub struct StepPair {
    /// The step label (`12` for `step12`).
    pub step: String,
    /// The rank (null when the names have none).
    pub rank: Option<u64>,
    /// The comparison, each device's rows cut to the
    /// [`STEP_ROWS`](crate::session::STEP_ROWS) largest changes.
    pub compare: CompareAtReport,
    /// Per device pair, the sum of the differences of the rows left out: with the rows
    /// kept, it adds up to the devices' `difference`.
    pub rest_difference: Vec<i64>,
    /// Why the pair could not be compared, when it could not.
    pub error: Option<String>,
}

/// `compare DIR_A DIR_B --at POINT` (`leakscope.compare_steps/1`).
#[derive(Clone, Debug, Serialize)]
pub struct CompareStepsReport {
    /// Schema name.
    pub schema: &'static str,
    /// Run A's directory.
    pub a: String,
    /// Run B's directory.
    pub b: String,
    /// The point compared.
    pub at: String,
    /// Every rank and step found in both runs, in step order.
    pub steps: Vec<StepPair>,
    /// Files of a rank and step found in one run only.
    pub unpaired: Vec<String>,
}
