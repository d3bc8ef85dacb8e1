//! `leakscope ranks DIR`: a whole run, one snapshot per rank and step, in the layouts
//! found in the wild; files are analysed in parallel, and ranks whose growth differs from
//! their peers are flagged.
//!
//! Layouts: verl's `<save_path>/step{N}/{tag}_rank{R}_pid{P}.pickle`, `steps{A}-{B}/`,
//! timestamp folders and `oom_<time>/` folders; torch_npu's
//! `oom_snapshot_<pid>_<time>.pickle`; plain `rank{R}*.pickle`. Other files (memray's
//! `.bin`, logs) are skipped and counted.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use regex::Regex;
use serde::Serialize;

use super::leaks::{self, LeakOptions};
use crate::attribute::{Attributor, FilterOptions, GroupBy};
use crate::load::{LoadOptions, load_path};
use crate::windows::{self, WindowSpec};

/// JSON schema name of [`RanksReport`].
pub const SCHEMA: &str = "leakscope.ranks/1";

/// A snapshot file found in the directory.
#[derive(Clone, Debug, Serialize)]
pub struct Found {
    /// Path.
    pub file: PathBuf,
    /// Rank from the name (`rank{R}`), when it has one.
    pub rank: Option<u64>,
    /// Step label from the folder: `12` for `step12`, `10-19` for `steps10-19`, `oom` for
    /// OOM dumps, else the folder's name (a timestamp).
    pub step: String,
    /// Numeric order of the step (the first number in it), for sorting.
    pub step_order: u64,
}

fn is_snapshot_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !lower.starts_with("memray")
        && [
            ".pickle",
            ".pkl",
            ".pickle.gz",
            ".pickle.zst",
            ".json",
            ".json.gz",
            ".msgpack",
        ]
        .iter()
        .any(|e| lower.ends_with(e))
}

/// Finds the snapshot files below `dir`; returns them and how many other files were skipped.
pub fn discover(dir: &Path) -> std::io::Result<(Vec<Found>, u64)> {
    let rank_re = Regex::new(r"rank[_-]?(\d+)").expect("valid regex");
    let step_re = Regex::new(r"^steps?[_-]?(\d+)(?:-(\d+))?$").expect("valid regex");
    let mut found = Vec::new();
    let mut skipped = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = e.file_name().to_string_lossy().to_string();
            if !is_snapshot_name(&name) {
                skipped += 1;
                continue;
            }
            let folder = p
                .parent()
                .filter(|f| *f != dir)
                .and_then(|f| f.file_name())
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default();
            let (step, order) = if let Some(c) = step_re.captures(&folder) {
                let a: u64 = c[1].parse().unwrap_or(0);
                match c.get(2) {
                    Some(b) => (format!("{a}-{}", b.as_str()), a),
                    None => (a.to_string(), a),
                }
            } else if folder.starts_with("oom")
                || name.starts_with("oom_snapshot")
                || name.contains("_oom_")
            {
                ("oom".to_string(), u64::MAX)
            } else {
                let digits: String = folder.chars().filter(|c| c.is_ascii_digit()).collect();
                (
                    folder.clone(),
                    digits
                        .get(..18.min(digits.len()))
                        .and_then(|d| d.parse().ok())
                        .unwrap_or(0),
                )
            };
            found.push(Found {
                rank: rank_re.captures(&name).and_then(|c| c[1].parse().ok()),
                file: p,
                step,
                step_order: order,
            });
        }
    }
    found.sort_by(|a, b| {
        (a.step_order, &a.step, a.rank, &a.file).cmp(&(b.step_order, &b.step, b.rank, &b.file))
    });
    Ok((found, skipped))
}

/// One rank at one step.
#[derive(Clone, Debug, Serialize)]
pub struct RankRow {
    /// Rank (null when the name has none).
    pub rank: Option<u64>,
    /// Step label.
    pub step: String,
    /// File.
    pub file: String,
    /// Most live (requested) bytes at any point of the trace.
    pub peak_bytes: u64,
    /// Σ block sizes held at the end.
    pub end_allocated_bytes: u64,
    /// Σ bytes per window of the suspects (leaks and retained memory).
    pub growth_bytes_per_window: u64,
    /// The largest suspect's site.
    pub top_suspect: Option<String>,
    /// The largest suspect's rate.
    pub top_suspect_bytes_per_window: u64,
    /// Windows of the analysis.
    pub windows: u64,
    /// This rank's growth differs from its peers' at the same step.
    pub outlier: bool,
    /// Why the file could not be analysed, when it could not.
    pub error: Option<String>,
}

/// Change of one rank from one step to the next.
#[derive(Clone, Debug, Serialize)]
pub struct Trend {
    /// Rank.
    pub rank: Option<u64>,
    /// Steps in order.
    pub steps: Vec<String>,
    /// Allocated at the end of each.
    pub end_allocated_bytes: Vec<u64>,
    /// Last minus first.
    pub change_bytes: i64,
}

/// The `ranks` report (`leakscope.ranks/1`).
#[derive(Clone, Debug, Serialize)]
pub struct RanksReport {
    /// Schema name.
    pub schema: &'static str,
    /// The directory.
    pub dir: String,
    /// One row per file.
    pub ranks: Vec<RankRow>,
    /// Per rank across steps (ranks seen in more than one step).
    pub trends: Vec<Trend>,
    /// Files skipped as not snapshots (memray `.bin`, logs).
    pub skipped_files: u64,
}

fn analyse(f: &Found, spec: &WindowSpec) -> RankRow {
    let mut row = RankRow {
        rank: f.rank,
        step: f.step.clone(),
        file: f.file.display().to_string(),
        peak_bytes: 0,
        end_allocated_bytes: 0,
        growth_bytes_per_window: 0,
        top_suspect: None,
        top_suspect_bytes_per_window: 0,
        windows: 0,
        outlier: false,
        error: None,
    };
    // Files are loaded side by side, one per core: no helper threads per load.
    let opts = LoadOptions {
        threads: false,
        ..LoadOptions::default()
    };
    let snap = match load_path(&f.file, opts) {
        Ok(s) => s,
        Err(e) => {
            row.error = Some(e.to_string());
            return row;
        }
    };
    let d = super::default_device(&snap);
    let Some(dev) = snap.devices().into_iter().find(|v| v.device == d) else {
        return row;
    };
    let rep = crate::replay::replay(&dev);
    row.peak_bytes = rep.peak().1;
    row.end_allocated_bytes = dev.held_bytes();
    let mut attr = Attributor::new(&snap, GroupBy::Site, &FilterOptions::default());
    let w = windows::windows(&snap, d, spec, &attr);
    let r = leaks::leaks(&rep, &w, &mut attr, &LeakOptions::default());
    row.windows = r.windows.count;
    row.growth_bytes_per_window = r.suspects.iter().map(|s| s.bytes_per_window).sum();
    if let Some(s) = r.suspects.first() {
        row.top_suspect = Some(s.key.clone());
        row.top_suspect_bytes_per_window = s.bytes_per_window;
    }
    row
}

/// Growth that stands out among peers: above twice their median and by at least 1 MiB
/// per window (so that noise of a few kilobytes between identical ranks is not flagged).
fn flag_outliers(rows: &mut [RankRow]) {
    let mut steps: Vec<String> = rows.iter().map(|r| r.step.clone()).collect();
    steps.sort();
    steps.dedup();
    for step in steps {
        let mut g: Vec<u64> = rows
            .iter()
            .filter(|r| r.step == step && r.error.is_none())
            .map(|r| r.growth_bytes_per_window)
            .collect();
        if g.len() < 2 {
            continue;
        }
        g.sort_unstable();
        let median = g[g.len() / 2];
        for r in rows
            .iter_mut()
            .filter(|r| r.step == step && r.error.is_none())
        {
            let v = r.growth_bytes_per_window;
            r.outlier = v > median.saturating_mul(2) && v >= median + (1 << 20);
        }
    }
}

/// Analyses every snapshot below `dir` (in parallel).
pub fn ranks(dir: &Path, spec: &WindowSpec) -> std::io::Result<RanksReport> {
    let (found, skipped) = discover(dir)?;
    let mut rows: Vec<RankRow> = found.par_iter().map(|f| analyse(f, spec)).collect();
    // JSON files beside the snapshots (ground truth, configs) are not snapshots: skip them.
    let before = rows.len();
    rows.retain(|r| {
        !r.error
            .as_deref()
            .is_some_and(|e| e.contains("not a memory snapshot"))
    });
    let skipped = skipped + (before - rows.len()) as u64;
    flag_outliers(&mut rows);
    let mut by_rank: Vec<Option<u64>> = rows.iter().map(|r| r.rank).collect();
    by_rank.sort();
    by_rank.dedup();
    let trends = by_rank
        .into_iter()
        .filter_map(|rank| {
            let mine: Vec<&RankRow> = rows
                .iter()
                .filter(|r| r.rank == rank && r.error.is_none() && r.step != "oom")
                .collect();
            (mine.len() > 1).then(|| Trend {
                rank,
                steps: mine.iter().map(|r| r.step.clone()).collect(),
                end_allocated_bytes: mine.iter().map(|r| r.end_allocated_bytes).collect(),
                change_bytes: mine.last().map_or(0, |l| l.end_allocated_bytes as i64)
                    - mine.first().map_or(0, |f| f.end_allocated_bytes as i64),
            })
        })
        .collect();
    Ok(RanksReport {
        schema: SCHEMA,
        dir: dir.display().to_string(),
        ranks: rows,
        trends,
        skipped_files: skipped,
    })
}
