//! What a front end asks for, typed: which devices, how to cut windows, how to group and
//! filter frames, and the leak finder's own options. Every value is parsed once (`FromStr`
//! types with typed errors, which clap's value parsers use as they are).

use std::fmt;
use std::str::FromStr;

use std::sync::Arc;

use crate::analysis::LeakOptions;
use crate::attribute::roles::RoleRules;
use crate::attribute::{FrameFilters, GroupBy};
use crate::windows::{WindowSpec, Within};

/// Which devices a command covers.
///
/// ```
/// use leakscope::session::DeviceSelection;
/// assert_eq!("all".parse::<DeviceSelection>(), Ok(DeviceSelection::All));
/// assert_eq!("1".parse::<DeviceSelection>(), Ok(DeviceSelection::Only(1)));
/// assert!("gpu1".parse::<DeviceSelection>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceSelection {
    /// Every device that has segments or trace events.
    #[default]
    All,
    /// One device, by index (it must be in the snapshot).
    Only(i64),
}

/// A `--device` value that is neither `all` nor an index.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: use a device index (0, 1, ...) or all")]
pub struct DeviceSelectionError(pub String);

impl FromStr for DeviceSelection {
    type Err = DeviceSelectionError;

    fn from_str(s: &str) -> Result<DeviceSelection, DeviceSelectionError> {
        match s {
            "all" => Ok(DeviceSelection::All),
            _ => s
                .parse()
                .map(DeviceSelection::Only)
                .map_err(|_| DeviceSelectionError(s.to_string())),
        }
    }
}

impl fmt::Display for DeviceSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSelection::All => f.write_str("all"),
            DeviceSelection::Only(d) => write!(f, "{d}"),
        }
    }
}

/// "These options": what every analysis of a session is run with.
///
/// ```
/// use leakscope::session::{DeviceSelection, Options};
/// let mut o = Options::default();
/// o.devices = DeviceSelection::Only(1);
/// o.windows = "frame:^forward_step$".parse().unwrap();
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    /// Which devices.
    pub devices: DeviceSelection,
    /// How windows (micro-batches) are cut.
    pub windows: WindowSpec,
    /// Only this phase of each step.
    pub within: Option<Within>,
    /// What allocations are grouped by.
    pub by: GroupBy,
    /// Which frames count.
    pub filters: FrameFilters,
    /// The leak finder's options.
    pub leaks: LeakOptions,
    /// The role rules: the user's `[roles]` before the built-in ones.
    pub roles: Arc<RoleRules>,
}
