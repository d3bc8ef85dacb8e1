//! `compare DIR_A DIR_B --at peak`: two run directories step by step (Megatron-Bridge's
//! per-step peak diff): the files of each rank and step paired across the runs, each pair
//! compared at the point as `compare A B --at` does, one pair in memory at a time.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::Session;
use super::compare::{CompareAtReport, compare_at};
use super::discover::{Found, walk};
use super::error::SessionError;
use super::options::Options;
use super::reports::schema;
use crate::analysis::At;
use crate::load::LoadOptions;

/// Rows kept per device pair of a step (the largest changes; the rest add up in
/// [`StepPair::rest_difference`]).
pub const STEP_ROWS: usize = 10;

/// One rank and step of both runs, compared at the point.
#[derive(Clone, Debug, Serialize)]
pub struct StepPair {
    /// The step label (`12` for `step12`).
    pub step: String,
    /// The rank (null when the names have none).
    pub rank: Option<u64>,
    /// The comparison, each device's rows cut to the [`STEP_ROWS`] largest changes.
    pub compare: CompareAtReport,
    /// Per device pair, the sum of the differences of the rows left out: with the rows
    /// kept, it adds up to the devices' `difference`.
    pub rest_difference: Vec<i64>,
    /// Why the pair could not be compared, when it could not.
    pub error: Option<String>,
}

/// `compare DIR_A DIR_B --at POINT` (`leakscope.compare_steps/1`).
#[derive(Clone, Debug, Serialize)]
pub struct CompareStepsReport {
    /// Schema name.
    pub schema: &'static str,
    /// Run A's directory.
    pub a: String,
    /// Run B's directory.
    pub b: String,
    /// The point compared.
    pub at: String,
    /// Every rank and step found in both runs, in step order.
    pub steps: Vec<StepPair>,
    /// Files of a rank and step found in one run only.
    pub unpaired: Vec<String>,
}

/// A file's place in a run: step order, step label, rank.
type StepKey = (u64, String, Option<u64>);

/// The files of a run directory by (step order, step, rank); OOM dumps left out; of two
/// files for one rank and step, the first.
fn by_step(dir: &Path) -> Result<BTreeMap<StepKey, Found>, SessionError> {
    let listing = walk(dir).map_err(|source| SessionError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut out = BTreeMap::new();
    for f in listing.found.into_iter().filter(|f| f.step != "oom") {
        out.entry((f.step_order, f.step.clone(), f.rank))
            .or_insert(f);
    }
    if out.is_empty() {
        return Err(SessionError::NoSnapshots {
            dir: dir.to_path_buf(),
        });
    }
    Ok(out)
}

/// Compares two run directories at `at`, step by step and rank by rank.
pub fn compare_steps(
    a: &Path,
    b: &Path,
    opts: &Options,
    at: At,
) -> Result<CompareStepsReport, SessionError> {
    let (sa, sb) = (by_step(a)?, by_step(b)?);
    let mut steps = Vec::new();
    let mut unpaired = Vec::new();
    for (key, fa) in &sa {
        let Some(fb) = sb.get(key) else {
            unpaired.push(fa.file.display().to_string());
            continue;
        };
        let side = |f: &Found| {
            Session::open(&f.file, LoadOptions::default()).and_then(|s| s.holders_at(opts, at))
        };
        let (ta, tb) = rayon::join(|| side(fa), || side(fb));
        let pair = match (ta, tb) {
            (Ok(ta), Ok(tb)) => {
                let mut compare = compare_at(&ta, &tb, at);
                let rest_difference = compare
                    .devices
                    .iter_mut()
                    .map(|d| {
                        let rest = d.rows.split_off(STEP_ROWS.min(d.rows.len()));
                        rest.iter().map(|r| r.difference).sum()
                    })
                    .collect();
                StepPair {
                    step: fa.step.clone(),
                    rank: fa.rank,
                    compare,
                    rest_difference,
                    error: None,
                }
            }
            (Err(e), _) | (_, Err(e)) => StepPair {
                step: fa.step.clone(),
                rank: fa.rank,
                compare: CompareAtReport {
                    schema: schema::COMPARE_AT,
                    a: fa.file.display().to_string(),
                    b: fb.file.display().to_string(),
                    at: at.to_string(),
                    devices: Vec::new(),
                    unpaired: Vec::new(),
                },
                rest_difference: Vec::new(),
                error: Some(e.to_string()),
            },
        };
        steps.push(pair);
    }
    for (key, fb) in &sb {
        if !sa.contains_key(key) {
            unpaired.push(fb.file.display().to_string());
        }
    }
    Ok(CompareStepsReport {
        schema: schema::COMPARE_STEPS,
        a: a.display().to_string(),
        b: b.display().to_string(),
        at: at.to_string(),
        steps,
        unpaired,
    })
}
