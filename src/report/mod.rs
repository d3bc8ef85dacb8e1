//! The reports the session builds and the renderers and exports read, as data only: plain
//! structs (serialized as each command's JSON) with no way to compute themselves. The
//! functions that build them are in [`session`](crate::session); [`render`](crate::render)
//! and [`export`](crate::export) only read them. This module sits below both: it imports
//! the analyses' findings (`analysis`, `attribute`, `windows`, `replay`) and, for `check`'s
//! measurements and limits, `budget::gate`; never the session or an output stage.
//!
//! ```
//! use leakscope::report::{LeaksReport, schema};
//! use leakscope::session::{Options, Session};
//! let s = Session::open("fixtures/scenarios/control_no_leak.pickle", Default::default())?;
//! let r: LeaksReport = s.leaks(&Options::default())?;
//! assert_eq!(r.schema, schema::LEAKS);
//! # Ok::<(), leakscope::session::SessionError>(())
//! ```

mod check;
mod compare;
mod page;
mod per_device;
mod ranks;
pub mod schema;
mod slice;

pub use check::{CheckReport, DeviceCheck, FileCheck};
pub use compare::{CompareAtReport, CompareReport, CompareStepsReport, StepPair, Unpaired};
pub use page::{DeviceReport, GrowthChart, GrowthLine, Marker, ReportData, StateMap, WindowMarks};
pub use per_device::{
    LeaksReport, OomReport, PerDevice, PhasesReport, SegmentsReport, TimelineReport, TopReport,
    TreeReport, Unresolved, WindowsReport,
};
pub use ranks::{RankSeries, RanksReport, Special};
pub use slice::{SliceReport, SlicedDevice};
