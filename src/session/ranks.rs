//! `ranks DIR`: a whole run, one snapshot per rank and step, analysed in parallel (one
//! file per core), one row per rank, step and device; ranks whose growth differs from
//! their peers are flagged.

use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use super::Session;
use super::discover::{Found, walk};
use super::error::SessionError;
use super::options::Options;
use super::run::DeviceRun;
use crate::analysis::leaks::DeviceLeaks;
use crate::analysis::ranks::{RankRow, flag_outliers, trends};
use crate::error::ErrorKind;
use crate::load::LoadOptions;
use crate::report::{RankSeries, RanksReport, schema};

/// Steps a rank needs for its series to be judged: three files give two windows.
pub const SERIES_MIN_STEPS: usize = 3;

/// A row of `f` with nothing found yet (no device, zeros).
/// The row of a file that could not be analysed, saying why (`message`; no kind: the
/// failure was not the library's, as a task lost with its machine).
pub(crate) fn error_row(f: &Found, message: String) -> RankRow {
    let mut r = row(f);
    r.error = Some(message);
    r
}

pub(crate) fn row(f: &Found) -> RankRow {
    RankRow {
        rank: f.rank,
        step: f.step.clone(),
        file: f.file.display().to_string(),
        device: None,
        peak_requested_bytes: 0,
        end_allocated_bytes: 0,
        growth_bytes_per_window: 0,
        top_suspect: None,
        top_suspect_bytes_per_window: 0,
        windows: 0,
        verdicts: false,
        outlier: false,
        disagrees: false,
        error: None,
        error_kind: None,
    }
}

/// What one file gives a run's report: its rows (one per device, or one saying why it
/// could not be read) and each device's largest suspects (at most [`TOP_SUSPECTS`]).
/// Small enough to send across a cluster: kilobytes, never the snapshot.
#[derive(Clone, Debug, Serialize)]
pub struct FileRanks {
    /// The rows.
    pub rows: Vec<RankRow>,
    /// `(device, suspects)`, largest rate first.
    pub suspects: Vec<(i64, Vec<crate::analysis::leaks::Growth>)>,
}

/// Suspects kept per device in [`FileRanks`].
pub const TOP_SUSPECTS: usize = 5;

/// Analyses one file of a run. `threads`: helper threads for the load (off when files are
/// loaded side by side, one per core).
pub fn analyse_file(f: &Found, opts: &Options, threads: bool) -> FileRanks {
    analyse_file_at(f, &f.file, opts, threads)
}

/// [`analyse_file`] of the file opened at `open`, named in its rows and errors as `f`
/// names it.
pub(crate) fn analyse_file_at(f: &Found, open: &Path, opts: &Options, threads: bool) -> FileRanks {
    let lo = LoadOptions {
        threads,
        ..LoadOptions::default()
    };
    let failed = |e: SessionError| {
        let mut r = row(f);
        r.error = Some(e.to_string());
        r.error_kind = Some(e.kind());
        FileRanks {
            rows: vec![r],
            suspects: Vec::new(),
        }
    };
    let s = match Session::open_as(open, &f.file, lo) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    let mut runs = match s.runs(opts) {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    if runs.is_empty() {
        // Nothing recorded: a row of zeros, not an error.
        return FileRanks {
            rows: vec![row(f)],
            suspects: Vec::new(),
        };
    }
    let (rows, suspects) = runs
        .iter_mut()
        .map(|r| {
            let found = r.find_leaks();
            let out = device_row(f, r, &found);
            let mut top = found.suspects;
            top.truncate(TOP_SUSPECTS);
            (out, (r.device(), top))
        })
        .unzip();
    FileRanks { rows, suspects }
}

/// The row of one device of `f`, from its run and what the leak finder found on it.
pub(crate) fn device_row(f: &Found, r: &DeviceRun, found: &DeviceLeaks) -> RankRow {
    let mut out = row(f);
    out.device = Some(r.device());
    out.peak_requested_bytes = r.replay.peak().1;
    out.end_allocated_bytes = r.view.allocated_bytes();
    out.windows = found.windows.count;
    out.verdicts = found.windows.verdicts;
    out.disagrees = crate::replay::Consistency::of(&r.view, &r.replay).disagrees();
    out.growth_bytes_per_window = found
        .suspects
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.bytes_per_window));
    if let Some(top) = found.suspects.first() {
        out.top_suspect = Some(top.site.clone());
        out.top_suspect_bytes_per_window = top.bytes_per_window;
    }
    out
}

/// A run's report from its files' rows, wherever they were computed: files that are not
/// snapshots leave, outliers are flagged, trends drawn. `skipped`: files the listing
/// already left out. `special_files` starts empty (the caller that walked the directory
/// fills it).
pub fn merge_ranks(
    dir: &Path,
    mut rows: Vec<RankRow>,
    skipped: u64,
) -> Result<RanksReport, SessionError> {
    // JSON files beside the snapshots (ground truth, configs) are not snapshots: skip them.
    let before = rows.len();
    rows.retain(|r| r.error_kind != Some(ErrorKind::NotASnapshot));
    let skipped = skipped + (before - rows.len()) as u64;
    if rows.is_empty() {
        return Err(SessionError::NoSnapshots {
            dir: dir.to_path_buf(),
        });
    }
    flag_outliers(&mut rows);
    Ok(RanksReport {
        schema: schema::RANKS,
        dir: dir.display().to_string(),
        trends: trends(&rows),
        ranks: rows,
        skipped_files: skipped,
        special_files: Vec::new(),
        series: Vec::new(),
    })
}

/// Analyses every snapshot below `dir`.
pub fn ranks(dir: &Path, opts: &Options) -> Result<RanksReport, SessionError> {
    if !dir.is_dir() {
        return Err(SessionError::NotADirectory {
            dir: dir.to_path_buf(),
        });
    }
    let listing = walk(dir).map_err(|source| SessionError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    // Files are loaded side by side, one per core: no helper threads per load.
    let rows: Vec<RankRow> = listing
        .found
        .par_iter()
        .flat_map(|f| analyse_file(f, opts, false).rows)
        .collect();
    let mut report = merge_ranks(dir, rows, listing.skipped)?;
    report.special_files = listing.special;
    report.series = rank_series(&listing.found, opts);
    Ok(report)
}

/// Each rank with at least [`SERIES_MIN_STEPS`] steps, its files (OOM dumps left out) read
/// as a series, one rank at a time (each series reads its files side by side).
pub(crate) fn rank_series(found: &[Found], opts: &Options) -> Vec<RankSeries> {
    // Files without a step (outside a run's layout) and OOM dumps are no step of a series.
    let steps: Vec<&Found> = found
        .iter()
        .filter(|f| !f.step.is_empty() && f.step != "oom")
        .collect();
    let mut ranks: Vec<Option<u64>> = steps.iter().map(|f| f.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut out = Vec::new();
    for rank in ranks {
        let mine: Vec<&Found> = steps.iter().copied().filter(|f| f.rank == rank).collect();
        if mine.len() < SERIES_MIN_STEPS {
            continue;
        }
        let files: Vec<std::path::PathBuf> = mine.iter().map(|f| f.file.clone()).collect();
        let blank = RankSeries {
            rank,
            device: None,
            steps: mine.iter().map(|f| f.step.clone()).collect(),
            verdicts: false,
            suspects: 0,
            top_site: None,
            top_kind: None,
            top_bytes_per_step: 0,
            top_onset_step: None,
            error: None,
        };
        let found = Session::open_series(&files, Default::default())
            .and_then(|s| s.leaks(opts).map(|r| (s, r)));
        let (session, report) = match found {
            Ok(x) => x,
            Err(e) => {
                out.push(RankSeries {
                    error: Some(e.to_string()),
                    ..blank
                });
                continue;
            }
        };
        // A file's step is the step of the file named in the window.
        let step_of = |name: &str| {
            mine.iter()
                .find(|f| f.file.display().to_string() == name)
                .map(|f| f.step.clone())
        };
        for d in &report.devices {
            let top = d.suspects.first();
            out.push(RankSeries {
                device: Some(d.device),
                verdicts: d.windows.verdicts,
                suspects: d.suspects.len() as u64,
                top_site: top.map(|g| g.site.clone()),
                top_kind: top.map(|g| g.kind),
                top_bytes_per_step: top.map_or(0, |g| g.bytes_per_window),
                top_onset_step: top.and_then(|g| g.onset_name.as_deref().and_then(step_of)),
                ..blank.clone()
            });
        }
        drop(session);
    }
    out
}
