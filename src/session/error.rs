//! Why a session cannot give a report: the file, or a request that does not fit it.

use std::path::PathBuf;

use crate::analysis::{At, PointError};
use crate::error::{ErrorKind, LoadError};

/// Why a session cannot give a report. Every variant is the input's or the options'
/// fault (a front end reports it as a usage error, exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The file cannot be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// `--device N` for a device the snapshot does not hold.
    #[error("{file}: no device {device} in this snapshot (devices: {available:?})")]
    NoDevice {
        /// The file.
        file: String,
        /// The device asked for.
        device: i64,
        /// The devices it holds.
        available: Vec<i64>,
    },
    /// `--at` names a point that exists on no selected device.
    #[error("{file}: --at {at}: {}", reasons.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("; "))]
    NoPoint {
        /// The file.
        file: String,
        /// The point asked for.
        at: At,
        /// Why, per device.
        reasons: Vec<PointError>,
    },
    /// A `slice` range that does not fit the file.
    #[error("{file}: {reason}")]
    Slice {
        /// The file.
        file: String,
        /// Why.
        reason: crate::analysis::range::RangeError,
    },
    /// `--within` matches no annotation on any selected device.
    #[error("{file}: --within {within}: no matching annotation on any device")]
    NoWithin {
        /// The file.
        file: String,
        /// The phase asked for.
        within: String,
    },
    /// A growth profile of a file whose devices have no windows to judge growth across.
    #[error("{file}: no device has windows to judge growth across: {}", reasons.join("; "))]
    NoWindows {
        /// The file.
        file: String,
        /// Why, per device.
        reasons: Vec<String>,
    },
    /// A run directory that cannot be read.
    #[error("cannot read {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A run directory without snapshots.
    #[error("no snapshot files below {} (looked for .pickle, .pkl, .json, .msgpack, optionally .gz/.zst)", dir.display())]
    NoSnapshots {
        /// The directory.
        dir: PathBuf,
    },
    /// Files that cannot be read as a series.
    #[error("{reason}")]
    Series {
        /// Why.
        reason: String,
    },
    /// `compare` given a run directory beside a file, or two without a point.
    #[error(
        "two run directories are compared step by step at a point: give both directories and --at peak (or end, oom; at=\"peak\" in Python)"
    )]
    StepsNeedTwoDirs,
    /// `ranks` given a path that is not a directory.
    #[error("{} is not a directory", dir.display())]
    NotADirectory {
        /// The path.
        dir: PathBuf,
    },
}

impl SessionError {
    /// What kind of failure this is: the load's kind, else a request that does not fit
    /// the input (`usage`), or a directory that cannot be listed (`io`).
    pub fn kind(&self) -> ErrorKind {
        match self {
            SessionError::Load(l) => l.kind(),
            SessionError::Dir { .. } => ErrorKind::Io,
            _ => ErrorKind::Usage,
        }
    }
}
