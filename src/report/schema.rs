//! Schema names, in one place.

/// [`super::LeaksReport`].
pub const LEAKS: &str = "leakscope.leaks/8";
/// [`super::WindowsReport`].
pub const WINDOWS: &str = "leakscope.windows/4";
/// [`super::PhasesReport`].
pub const PHASES: &str = "leakscope.phases/1";
/// [`super::TopReport`].
pub const TOP: &str = "leakscope.top/4";
/// [`super::TreeReport`].
pub const TREE: &str = "leakscope.tree/4";
/// [`super::TimelineReport`].
pub const TIMELINE: &str = crate::analysis::allocations::SCHEMA;
/// [`super::SegmentsReport`].
pub const SEGMENTS: &str = "leakscope.segments/3";
/// [`super::OomReport`].
pub const OOM: &str = "leakscope.oom/5";
/// [`super::CompareReport`].
pub const COMPARE: &str = "leakscope.compare/3";
/// [`super::CompareAtReport`].
pub const COMPARE_AT: &str = "leakscope.compare_at/2";
/// [`super::CompareStepsReport`].
pub const COMPARE_STEPS: &str = "leakscope.compare_steps/1";
/// [`super::CheckReport`].
pub const CHECK: &str = "leakscope.check/5";
/// [`super::RanksReport`].
pub const RANKS: &str = "leakscope.ranks/5";
/// [`super::ReportData`].
pub const REPORT: &str = "leakscope.report/7";
/// [`super::SliceReport`].
pub const SLICE: &str = "leakscope.slice/1";
/// `analysis::summary::Summary` (its shape did not change with devices).
pub const SUMMARY: &str = crate::analysis::summary::SCHEMA;
