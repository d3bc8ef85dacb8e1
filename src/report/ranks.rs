//! `ranks`' report: a whole run, one row per rank, step and device, the trends across
//! steps, each rank's files read as a series, and what the walk of the directory skipped.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::analysis::ranks::{RankRow, Trend};
use crate::attribute::Site;

/// `leakscope ranks` (`leakscope.ranks/5`).
#[derive(Clone, Debug, Serialize)]
pub struct RanksReport {
    /// Schema name.
    pub schema: &'static str,
    /// The directory.
    pub dir: String,
    /// One row per file and device.
    pub ranks: Vec<RankRow>,
    /// Per rank across steps (ranks seen in more than one step).
    pub trends: Vec<Trend>,
    /// Files skipped as not snapshots (memray `.bin`, logs).
    pub skipped_files: u64,
    /// FIFOs, sockets and devices in the directory: skipped, never opened.
    pub special_files: Vec<Special>,
    /// Each rank's files across steps read as a series (ranks with at least
    /// [`SERIES_MIN_STEPS`](crate::session::SERIES_MIN_STEPS) steps): what grows from one
    /// step's end to the next.
    pub series: Vec<RankSeries>,
}

/// One rank's (and device's) verdict across steps: its files as a series, the largest
/// suspect of the leak finder on it.
#[derive(Clone, Debug, Serialize)]
pub struct RankSeries {
    /// Rank (null when the names have none).
    pub rank: Option<u64>,
    /// Device (null when the series could not be read).
    pub device: Option<i64>,
    /// The steps, in order.
    pub steps: Vec<String>,
    /// Whether growth could be judged (at least two windows of change).
    pub verdicts: bool,
    /// Suspects (leaks and retained memory) across steps.
    pub suspects: u64,
    /// The largest suspect's site.
    pub top_site: Option<Site>,
    /// Its kind.
    pub top_kind: Option<crate::analysis::Kind>,
    /// Its bytes per step (per window of the series).
    pub top_bytes_per_step: u64,
    /// The step from which it grows (the file that first showed it).
    pub top_onset_step: Option<String>,
    /// Why the series could not be read, when it could not.
    pub error: Option<String>,
}

/// Something found while walking that is neither a directory nor a regular file (a FIFO,
/// a socket, a device): skipped, never opened (opening a FIFO waits for a writer).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Special {
    /// Path.
    pub file: PathBuf,
    /// What it is: `fifo`, `socket`, `block device`, `character device` or `other`.
    pub kind: String,
}
