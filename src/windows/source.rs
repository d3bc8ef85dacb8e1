//! Where a device's windows come from: one closed list, so that code decides on a kind,
//! never on a word (the JSON spells each as before).

use serde::{Deserialize, Serialize};

/// Where windows come from.
///
/// ```
/// use leakscope::windows::WindowSource;
/// assert_eq!(WindowSource::WholeTrace.as_str(), "whole-trace");
/// assert_eq!(serde_json::to_string(&WindowSource::Frame).unwrap(), "\"frame\"");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum WindowSource {
    /// A family of `record_function` annotations (`micro_batch_3`).
    Annotation,
    /// Changes of the trace's `user_metadata`.
    Metadata,
    /// Entries into a function (a frame pattern).
    Frame,
    /// The allocations of one call site.
    Site,
    /// Every N events.
    Every,
    /// A series of snapshots: one window per file after the first.
    Snapshots,
    /// The whole trace as one window (nothing qualified).
    #[default]
    WholeTrace,
}

impl WindowSource {
    /// The word JSON and `--windows` use.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowSource::Annotation => "annotation",
            WindowSource::Metadata => "metadata",
            WindowSource::Frame => "frame",
            WindowSource::Site => "site",
            WindowSource::Every => "every",
            WindowSource::Snapshots => "snapshots",
            WindowSource::WholeTrace => "whole-trace",
        }
    }
}

impl std::fmt::Display for WindowSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
