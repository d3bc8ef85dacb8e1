//! `ranks DIR`: a whole run, one snapshot per rank and step, analysed in parallel (one
//! file per core), one row per rank, step and device; ranks whose growth differs from
//! their peers are flagged.

use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use super::Session;
use super::discover::{Found, discover};
use super::error::SessionError;
use super::options::Options;
use super::reports::schema;
use crate::analysis::ranks::{RankRow, Trend, flag_outliers, trends};
use crate::load::LoadOptions;

/// `leakscope ranks` (`leakscope.ranks/3`).
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
}

fn row(f: &Found) -> RankRow {
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
    }
}

/// The rows of one file: one per device, or one saying why it could not be read.
fn analyse(f: &Found, opts: &Options) -> Vec<RankRow> {
    // Files are loaded side by side, one per core: no helper threads per load.
    let lo = LoadOptions {
        threads: false,
        ..LoadOptions::default()
    };
    let failed = |e: SessionError| {
        let mut r = row(f);
        r.error = Some(e.to_string());
        vec![r]
    };
    let s = match Session::open(&f.file, lo) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    let mut runs = match s.runs(opts) {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    if runs.is_empty() {
        return vec![row(f)]; // nothing recorded: a row of zeros, not an error
    }
    runs.iter_mut()
        .map(|r| {
            let mut out = row(f);
            out.device = Some(r.device());
            out.peak_requested_bytes = r.replay.peak().1;
            out.end_allocated_bytes = r.view.allocated_bytes();
            let found = r.find_leaks();
            out.windows = found.windows.count;
            out.verdicts = found.windows.verdicts;
            out.disagrees = crate::replay::Consistency::of(&r.view, &r.replay).disagrees();
            out.growth_bytes_per_window = found.suspects.iter().map(|s| s.bytes_per_window).sum();
            if let Some(top) = found.suspects.first() {
                out.top_suspect = Some(top.site.clone());
                out.top_suspect_bytes_per_window = top.bytes_per_window;
            }
            out
        })
        .collect()
}

/// Analyses every snapshot below `dir`.
pub fn ranks(dir: &Path, opts: &Options) -> Result<RanksReport, SessionError> {
    if !dir.is_dir() {
        return Err(SessionError::NotADirectory {
            dir: dir.to_path_buf(),
        });
    }
    let (found, skipped) = discover(dir).map_err(|source| SessionError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut rows: Vec<RankRow> = found.par_iter().flat_map(|f| analyse(f, opts)).collect();
    // JSON files beside the snapshots (ground truth, configs) are not snapshots: skip them.
    let before = rows.len();
    rows.retain(|r| {
        !r.error
            .as_deref()
            .is_some_and(|e| e.contains("not a memory snapshot"))
    });
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
    })
}
