//! What a whole run's rows say together: ranks whose growth differs from their peers at
//! the same step, and each rank's memory from one step to the next.

use serde::{Deserialize, Serialize};

use crate::attribute::Site;

/// One rank at one step.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RankRow {
    /// Rank (null when the name has none).
    pub rank: Option<u64>,
    /// Step label.
    pub step: String,
    /// File.
    pub file: String,
    /// Device (`null` for a file that failed to load or holds no device).
    pub device: Option<i64>,
    /// The most bytes requested at any point of the trace.
    pub peak_requested_bytes: u64,
    /// Σ sizes of the blocks allocated at the end (pending frees excluded).
    pub end_allocated_bytes: u64,
    /// Σ bytes per window of the suspects (leaks and retained memory).
    pub growth_bytes_per_window: u64,
    /// The largest suspect's site.
    pub top_suspect: Option<Site>,
    /// The largest suspect's rate.
    pub top_suspect_bytes_per_window: u64,
    /// Windows of the analysis.
    pub windows: u64,
    /// Whether the windows are units of work to judge growth across (false: no growth
    /// figures, and never an outlier).
    pub verdicts: bool,
    /// This rank's growth differs from its peers' at the same step.
    pub outlier: bool,
    /// The file's trace and final state disagree on this device (`leaks` on the file
    /// says how).
    pub disagrees: bool,
    /// Why the file could not be analysed, when it could not.
    pub error: Option<String>,
    /// What kind of failure that is (`not_a_snapshot`, `truncated`, ...): what code
    /// decides on, never the words.
    #[serde(default)]
    pub error_kind: Option<crate::error::ErrorKind>,
}

/// Change of one rank from one step to the next.
#[derive(Clone, Debug, Serialize)]
pub struct Trend {
    /// Rank.
    pub rank: Option<u64>,
    /// Device.
    pub device: Option<i64>,
    /// Steps in order.
    pub steps: Vec<String>,
    /// Allocated at the end of each.
    pub end_allocated_bytes: Vec<u64>,
    /// Last minus first.
    pub change_bytes: i64,
}

/// Growth that stands out among peers: above twice their median and by at least 1 MiB
/// per window (so that noise of a few kilobytes between identical ranks is not flagged).
/// Files outside a run's layout (no step, no rank) are nobody's peers.
pub fn flag_outliers(rows: &mut [RankRow]) {
    let peer =
        |r: &RankRow| r.error.is_none() && r.verdicts && (r.rank.is_some() || !r.step.is_empty());
    let mut steps: Vec<String> = rows.iter().map(|r| r.step.clone()).collect();
    steps.sort();
    steps.dedup();
    for step in steps {
        let mut g: Vec<u64> = rows
            .iter()
            .filter(|r| r.step == step && peer(r))
            .map(|r| r.growth_bytes_per_window)
            .collect();
        if g.len() < 2 {
            continue;
        }
        g.sort_unstable();
        let median = g[g.len() / 2];
        for r in rows.iter_mut().filter(|r| r.step == step && peer(r)) {
            let v = r.growth_bytes_per_window;
            r.outlier = v > median.saturating_mul(2) && v >= median.saturating_add(1 << 20);
        }
    }
}

/// Each rank's memory held at the end across the steps it appears in (ranks seen in more
/// than one step; OOM dumps are not steps).
pub fn trends(rows: &[RankRow]) -> Vec<Trend> {
    let mut keys: Vec<(Option<u64>, Option<i64>)> =
        rows.iter().map(|r| (r.rank, r.device)).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|(rank, device)| {
            let mine: Vec<&RankRow> = rows
                .iter()
                .filter(|r| {
                    r.rank == rank
                        && r.device == device
                        && r.error.is_none()
                        && !r.step.is_empty()
                        && r.step != "oom"
                })
                .collect();
            (mine.len() > 1).then(|| Trend {
                rank,
                device,
                steps: mine.iter().map(|r| r.step.clone()).collect(),
                end_allocated_bytes: mine.iter().map(|r| r.end_allocated_bytes).collect(),
                change_bytes: mine.last().map_or(0, |l| l.end_allocated_bytes as i64)
                    - mine.first().map_or(0, |f| f.end_allocated_bytes as i64),
            })
        })
        .collect()
}
