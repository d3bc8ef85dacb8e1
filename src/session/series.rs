//! A series of snapshot files (one per step, or a run directory's files of one rank in
//! step order) opened as one session: the files stitched into one trace whose windows
//! are the changes between consecutive files (see [`crate::load::series`]). Every report
//! of a session works on it; the leak finder's rates are then per snapshot.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::Session;
use super::discover::walk;
use super::error::SessionError;
use crate::load::series::Stitcher;
use crate::load::{LoadOptions, load_path};
use crate::windows::SeriesWindows;

/// How the files of a series are read.
///
/// ```
/// let o = leakscope::session::SeriesOptions::default();
/// assert!(o.max_decompressed_bytes > 0);
/// ```
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct SeriesOptions<'p> {
    /// As [`LoadOptions::max_decompressed_bytes`], per file.
    pub max_decompressed_bytes: u64,
    /// Called with `(files read, files)` as the files come in.
    pub progress: Option<&'p (dyn Fn(usize, usize) + Sync)>,
}

impl Default for SeriesOptions<'_> {
    fn default() -> Self {
        SeriesOptions {
            max_decompressed_bytes: LoadOptions::default().max_decompressed_bytes,
            progress: None,
        }
    }
}

/// The fewest files a series is read from: two give one window of change.
pub const MIN_SERIES_FILES: usize = 2;

impl Session {
    /// Opens `paths` as a series, in the order of the numbers in their file names (`step2`
    /// before `step10`, as [`natural_order`]; the folders only break ties, so where the
    /// files sit never reorders the steps): each file the state at the end of one unit
    /// of work. Files are read side by side (one per core) a batch at a time, so at
    /// most a core's count of them is held at once besides the stitched trace.
    pub fn open_series(paths: &[PathBuf], opts: SeriesOptions) -> Result<Session, SessionError> {
        if paths.len() < MIN_SERIES_FILES {
            return Err(SessionError::Series {
                reason: format!(
                    "a series needs at least {MIN_SERIES_FILES} files, one per step, in step order; got {}",
                    paths.len()
                ),
            });
        }
        let mut paths = paths.to_vec();
        // A shell's `step*.pickle` gives step10 before step2: the numbers decide.
        paths.sort_by(|a, b| {
            let name = |p: &PathBuf| p.file_name().map(|n| n.to_string_lossy().into_owned());
            natural_order(&name(a).unwrap_or_default(), &name(b).unwrap_or_default())
                .then_with(|| natural_order(&a.to_string_lossy(), &b.to_string_lossy()))
        });
        let paths = &paths[..];
        let mut stitcher = Stitcher::default();
        let batch = rayon::current_num_threads().max(1);
        let mut done = 0;
        for chunk in paths.chunks(batch) {
            let loaded: Vec<_> = chunk
                .par_iter()
                .map(|p| {
                    let lo = LoadOptions {
                        threads: false,
                        max_decompressed_bytes: opts.max_decompressed_bytes,
                        ..LoadOptions::default()
                    };
                    load_path(p, lo)
                })
                .collect();
            for (p, snap) in chunk.iter().zip(loaded) {
                stitcher.push(p.display().to_string(), snap?);
                done += 1;
                if let Some(f) = opts.progress {
                    f(done, paths.len());
                }
            }
        }
        let mut series = stitcher.finish();
        if series.traced_events > 0 && series.traced_windows == 0 {
            series.snapshot.warnings.push(format!(
                "the files hold {} trace events, but no file's trace reaches back to the file before it: the series is read from each file's state (run leaks on one file to use its trace)",
                series.traced_events
            ));
        }
        let name = format!(
            "{} … {} ({} snapshots)",
            series.files[0],
            series.files[series.files.len() - 1],
            series.files.len()
        );
        let mut s = Session::from_snapshot(series.snapshot, name);
        s.series = Some(SeriesWindows::new(series.files, series.starts));
        Ok(s)
    }

    /// Whether this session is a series of files.
    pub fn is_series(&self) -> bool {
        self.series.is_some()
    }
}

/// The files of a run directory that form one rank's series, in step order: every
/// snapshot below `dir` but OOM dumps, of `rank` (or of the only rank there is).
pub fn series_files(dir: &Path, rank: Option<u64>) -> Result<Vec<PathBuf>, SessionError> {
    let listing = walk(dir).map_err(|source| SessionError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let steps: Vec<_> = listing
        .found
        .into_iter()
        .filter(|f| f.step != "oom")
        .collect();
    if steps.is_empty() {
        return Err(SessionError::NoSnapshots {
            dir: dir.to_path_buf(),
        });
    }
    // Beside ranked files, files without a rank are not a rank's (a truth file, a config).
    let steps: Vec<_> = if steps.iter().any(|f| f.rank.is_some()) {
        steps.into_iter().filter(|f| f.rank.is_some()).collect()
    } else {
        steps
    };
    let mut ranks: Vec<Option<u64>> = steps.iter().map(|f| f.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let rank = match rank {
        Some(r) => Some(r),
        None if ranks.len() == 1 => ranks[0],
        None => {
            return Err(SessionError::Series {
                reason: format!(
                    "{} holds the snapshots of {} ranks ({}): name one with --rank",
                    dir.display(),
                    ranks.len(),
                    ranks
                        .iter()
                        .map(|r| rank_name(*r))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    };
    let files: Vec<PathBuf> = steps
        .into_iter()
        .filter(|f| f.rank == rank)
        .map(|f| f.file)
        .collect();
    if files.is_empty() {
        return Err(SessionError::Series {
            reason: format!(
                "{}: no snapshot of rank {} (ranks: {})",
                dir.display(),
                rank_name(rank),
                ranks
                    .iter()
                    .map(|r| rank_name(*r))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    Ok(files)
}

/// A rank as messages name it (`none`: files without a rank in their names).
fn rank_name(r: Option<u64>) -> String {
    r.map_or_else(|| "none".into(), |r| r.to_string())
}

/// Orders names as people number files: runs of digits compare by value (`step2` before
/// `step10`), the rest by character; equal values fall back to the text.
///
/// ```
/// use leakscope::session::natural_order;
/// let mut v = vec!["step10.pickle", "step2.pickle", "step1.pickle"];
/// v.sort_by(|a, b| natural_order(a, b));
/// assert_eq!(v, ["step1.pickle", "step2.pickle", "step10.pickle"]);
/// ```
pub fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn parts(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (pa, pb) = (parts(a), parts(b));
    for (x, y) in pa.iter().zip(&pb) {
        let o = match (x, y) {
            ((true, dx), (true, dy)) => {
                let (tx, ty) = (dx.trim_start_matches('0'), dy.trim_start_matches('0'));
                tx.len().cmp(&ty.len()).then_with(|| tx.cmp(ty))
            }
            ((_, sx), (_, sy)) => sx.cmp(sy),
        };
        if o.is_ne() {
            return o;
        }
    }
    pa.len().cmp(&pb.len()).then_with(|| a.cmp(b))
}
