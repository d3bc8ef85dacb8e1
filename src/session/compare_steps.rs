//! `compare DIR_A DIR_B --at peak`: two run directories step by step (Megatron-Bridge's
//! per-step peak diff): the files of each rank and step paired across the runs, each pair
//! compared at the point as `compare A B --at` does, one pair in memory at a time.

use std::collections::BTreeMap;
use std::path::Path;

use super::Session;
use super::compare::compare_at;
use super::discover::{Found, walk};
use super::error::SessionError;
use super::options::Options;
use crate::analysis::At;
use crate::load::LoadOptions;
use crate::report::{CompareAtReport, CompareStepsReport, StepPair, schema};

/// Rows kept per device pair of a step (the largest changes; the rest add up in
/// [`StepPair::rest_difference`]).
pub const STEP_ROWS: usize = 10;

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

/// How `compare A B` compares: `Some(at)` step by step (two run directories at a
/// point), `None` file against file; a directory beside a file, or two directories
/// without `at`, is [`SessionError::StepsNeedTwoDirs`].
pub fn steps_at(a: &Path, b: &Path, at: Option<At>) -> Result<Option<At>, SessionError> {
    match (a.is_dir(), b.is_dir(), at) {
        (false, false, _) => Ok(None),
        (true, true, Some(at)) => Ok(Some(at)),
        _ => Err(SessionError::StepsNeedTwoDirs),
    }
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
