//! Finding a run's snapshots in a directory, in the layouts found in the wild: verl's
//! `<save_path>/step{N}/{tag}_rank{R}_pid{P}.pickle`, `steps{A}-{B}/`, timestamp folders
//! and `oom_<time>/` folders; torch_npu's `oom_snapshot_<pid>_<time>.pickle`; plain
//! `rank{R}*.pickle`. Other files (memray's `.bin`, logs) are skipped and counted.

use std::path::{Path, PathBuf};

use regex::Regex;
use serde::{Deserialize, Serialize};

/// A snapshot file found in the directory.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
