//! One text per report: what the command line prints for it and what Python's `str()` of
//! the same result is. Each report names its renderer here once.

use super::Style;
use crate::analysis::summary::Summary;
use crate::report::{
    CheckReport, CompareAtReport, CompareReport, CompareStepsReport, LeaksReport, OomReport,
    PhasesReport, RanksReport, SegmentsReport, TimelineReport, TopReport, TreeReport,
    WindowsReport,
};

/// A report as the terminal shows it.
///
/// ```
/// use leakscope::render::{Style, Text};
/// use leakscope::session::Session;
/// let path = std::path::Path::new("fixtures/scenarios/control_no_leak.pickle");
/// let s = Session::open(path, Default::default())?;
/// let text = s.summary().text(Style { color: false });
/// assert!(text.contains("reserved"));
/// # Ok::<(), leakscope::session::SessionError>(())
/// ```
pub trait Text {
    /// The text, coloured when `style` says so.
    fn text(&self, style: Style) -> String;
}

macro_rules! text {
    ($($report:ty => $render:path),* $(,)?) => {
        $(impl Text for $report {
            fn text(&self, style: Style) -> String {
                $render(self, style)
            }
        })*
    };
}

text! {
    Summary => super::summary::text,
    TopReport => super::top::text,
    LeaksReport => super::leaks::text,
    CompareReport => super::leaks::compare_text,
    CompareAtReport => super::compare_at::text,
    CompareStepsReport => super::compare_at::steps_text,
    OomReport => super::oom::text,
    PhasesReport => super::phases::text,
    SegmentsReport => super::segments::text,
    TimelineReport => super::allocations::text,
    RanksReport => super::ranks::text,
    CheckReport => super::check::text,
    WindowsReport => super::windows::text,
}

/// The tree at its default threshold (`--min-share`'s default).
impl Text for TreeReport {
    fn text(&self, style: Style) -> String {
        super::tree::text(self, super::tree::DEFAULT_MIN_SHARE, style)
    }
}
