//! Finding a run's snapshots in a directory, in the layouts found in the wild: verl's
//! `<save_path>/step{N}/{tag}_rank{R}_pid{P}.pickle`, `steps{A}-{B}/`, timestamp folders
//! and `oom_<time>/` folders; torch_npu's `oom_snapshot_<pid>_<time>.pickle`; plain
//! `rank{R}*.pickle`. Other files (memray's `.bin`, logs) are skipped and counted; FIFOs,
//! sockets and devices are skipped and listed, never opened. Each directory is walked
//! once (by device and inode), however many symlinks lead to it.

use std::path::{Path, PathBuf};

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::report::Special;

/// A snapshot file found in the directory.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Found {
    /// Path.
    pub file: PathBuf,
    /// Rank from the name (`rank{R}`), when it has one.
    pub rank: Option<u64>,
    /// Step label from the folder: `12` for `step12`, `10-19` for `steps10-19`, `oom` for
    /// OOM dumps, the folder's name when it holds a number (a timestamp), else empty: a
    /// file outside a run's layout has no step, and no trend is drawn through it.
    pub step: String,
    /// Numeric order of the step (the first number in it), for sorting.
    pub step_order: u64,
}

impl Found {
    /// The order of a run's files: by step, then rank (none first), then path.
    pub fn cmp_order(&self, other: &Found) -> std::cmp::Ordering {
        (self.step_order, &self.step, self.rank, &self.file).cmp(&(
            other.step_order,
            &other.step,
            other.rank,
            &other.file,
        ))
    }
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

/// What a walk of a run directory found.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// The snapshot files, by step, then rank, then path.
    pub found: Vec<Found>,
    /// Regular files skipped as not snapshots (by their names).
    pub skipped: u64,
    /// Those files.
    pub skipped_files: Vec<PathBuf>,
    /// FIFOs, sockets and devices: skipped, never opened.
    pub special: Vec<Special>,
}

/// What a directory entry is, its symlink followed (`None`: its target cannot be
/// looked at, a dangling link: treated as a file, whose load then says why).
fn kind_of(e: &std::fs::DirEntry, p: &Path) -> Option<std::fs::FileType> {
    let t = e.file_type().ok()?;
    if t.is_symlink() {
        std::fs::metadata(p).ok().map(|m| m.file_type())
    } else {
        Some(t)
    }
}

/// A directory's identity: device and inode, so a directory reached twice (through a
/// symlink, or a symlink loop such as `loop -> ..`) is walked once.
#[cfg(unix)]
fn identity(d: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(d).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn identity(d: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(d).ok()
}

/// Finds the snapshot files below `dir`; returns them and how many other files were
/// skipped (special files included). See [`walk`].
pub fn discover(dir: &Path) -> std::io::Result<(Vec<Found>, u64)> {
    let l = walk(dir)?;
    Ok((l.found, l.skipped + l.special.len() as u64))
}

/// Walks `dir` for snapshot files. Every directory is walked once, known by its device
/// and inode: the real directories first, then the symlinked ones not reached already
/// (so `latest -> step12` or `loop -> ..` add nothing). FIFOs, sockets and devices are
/// listed in [`Listing::special`] and never opened, whatever their names.
pub fn walk(dir: &Path) -> std::io::Result<Listing> {
    let rank_re = Regex::new(r"rank[_-]?(\d+)").expect("valid regex");
    let step_re = Regex::new(r"^steps?[_-]?(\d+)(?:-(\d+))?$").expect("valid regex");
    let mut found = Vec::new();
    let mut skipped_files = Vec::new();
    let mut special = Vec::new();
    let mut visited = std::collections::HashSet::new();
    // Breadth first, so the links of the top folders are met first.
    let mut real = std::collections::VecDeque::from([dir.to_path_buf()]);
    // Directories reached through a symlink: walked once the real ones are, if new, in
    // the order met, so the shallowest link to a directory is the one its files are
    // named through.
    let mut linked = std::collections::VecDeque::new();
    while let Some(d) = real.pop_front().or_else(|| linked.pop_front()) {
        // The first directory is read whatever its identity; the others, where one
        // cannot be had, are skipped rather than risk a loop.
        match identity(&d) {
            Some(id) if !visited.insert(id) => continue,
            Some(_) => {}
            None if d != dir => continue,
            None => {}
        }
        let mut entries: Vec<_> = std::fs::read_dir(&d)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let kind = kind_of(&e, &p);
            if let Some(t) = &kind {
                if t.is_dir() {
                    if e.file_type().is_ok_and(|t| t.is_symlink()) {
                        linked.push_back(p);
                    } else {
                        real.push_back(p);
                    }
                    continue;
                }
                if let Some(k) =
                    crate::load::SpecialFile::of(t).map(crate::load::SpecialFile::label)
                {
                    special.push(Special {
                        file: p,
                        kind: k.to_string(),
                    });
                    continue;
                }
            }
            let name = e.file_name().to_string_lossy().to_string();
            if !is_snapshot_name(&name) {
                skipped_files.push(p);
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
                match digits
                    .get(..18.min(digits.len()))
                    .and_then(|d| d.parse().ok())
                {
                    // A numbered folder (a timestamp, `iter_100`): its name is the step.
                    Some(order) => (folder.clone(), order),
                    // A folder that names no step (`cuda`, the top itself): no step.
                    None => (String::new(), 0),
                }
            };
            found.push(Found {
                rank: rank_re.captures(&name).and_then(|c| c[1].parse().ok()),
                file: p,
                step,
                step_order: order,
            });
        }
    }
    found.sort_by(Found::cmp_order);
    special.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(Listing {
        found,
        skipped: skipped_files.len() as u64,
        skipped_files,
        special,
    })
}
