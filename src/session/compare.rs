//! `compare A B`: what each run brings (its leak findings, what it holds at the end, its
//! backward pass), and the two put side by side device by device.

use rayon::prelude::*;

use super::Session;
use super::error::SessionError;
use super::options::Options;
use crate::analysis::At;
use crate::analysis::compare::{self, SideInput, backward_bytes};
use crate::analysis::leaks::DeviceLeaks;
use crate::analysis::point_diff::point_diff;
use crate::analysis::top::{self, DeviceTop};
use crate::report::{CompareAtReport, CompareReport, TopReport, Unpaired, schema};

/// One device of one run, ready to compare.
#[derive(Clone, Debug)]
pub struct SideDevice {
    /// The leak finder's findings.
    pub leaks: DeviceLeaks,
    /// Everything live at the end.
    pub end: DeviceTop,
    /// Bytes allocated by the backward pass.
    pub backward_bytes: u64,
}

/// What one run brings to a comparison (computed file by file, so that only one
/// snapshot need be in memory at a time).
#[derive(Clone, Debug)]
pub struct CompareSide {
    /// The file.
    pub file: String,
    /// Its selected devices.
    pub devices: Vec<SideDevice>,
}

impl Session {
    /// What this run brings to a comparison.
    pub fn compare_side(&self, opts: &Options) -> Result<CompareSide, SessionError> {
        let mut runs = self.runs(opts)?;
        self.cut_windows(&mut runs, opts)?;
        let snap = self.snapshot();
        let devices = runs
            .par_iter_mut()
            .map(|r| {
                let leaks = r.find_leaks();
                let end = r.end_point();
                SideDevice {
                    leaks,
                    end: top::top(&r.replay, end, &mut r.attr, usize::MAX),
                    backward_bytes: backward_bytes(snap, r.device()),
                }
            })
            .collect();
        Ok(CompareSide {
            file: self.name().to_string(),
            devices,
        })
    }
}

/// Pairs the devices of two runs: the one active device of each when both have one (rank
/// files name their own GPU), else by index; with the devices left unpaired.
fn pair<T>(a: &[T], b: &[T], dev: impl Fn(&T) -> i64) -> (Vec<(usize, usize)>, Vec<Unpaired>) {
    let mut pairs = Vec::new();
    if a.len() == 1 && b.len() == 1 {
        pairs.push((0, 0));
    } else {
        for (i, x) in a.iter().enumerate() {
            if let Some(j) = b.iter().position(|y| dev(y) == dev(x)) {
                pairs.push((i, j));
            }
        }
    }
    let mut unpaired = Vec::new();
    for (run, side, first) in [("a", a, true), ("b", b, false)] {
        for (k, d) in side.iter().enumerate() {
            if !pairs
                .iter()
                .any(|p| if first { p.0 == k } else { p.1 == k })
            {
                unpaired.push(Unpaired {
                    run,
                    device: dev(d),
                });
            }
        }
    }
    (pairs, unpaired)
}

/// Pairs the devices of two runs and compares each pair.
pub fn compare<'a>(a: &'a CompareSide, b: &'a CompareSide) -> CompareReport {
    let (pairs, unpaired) = pair(&a.devices, &b.devices, |s| s.leaks.device);
    let input = |file: &'a str, s: &'a SideDevice| SideInput {
        file,
        leaks: &s.leaks,
        end: &s.end,
        backward_bytes: s.backward_bytes,
    };
    let devices = pairs
        .iter()
        .map(|&(x, y)| {
            compare::compare(input(&a.file, &a.devices[x]), input(&b.file, &b.devices[y]))
        })
        .collect();
    CompareReport {
        schema: schema::COMPARE,
        a: a.file.clone(),
        b: b.file.clone(),
        devices,
        unpaired,
    }
}

/// Puts `a` and `b` (`top` at one point with no row limit, per device) side by side.
pub fn compare_at(a: &TopReport, b: &TopReport, at: At) -> CompareAtReport {
    let (pairs, unpaired) = pair(&a.devices, &b.devices, |t| t.device);
    CompareAtReport {
        schema: schema::COMPARE_AT,
        a: a.file.clone(),
        b: b.file.clone(),
        at: at.to_string(),
        devices: pairs
            .iter()
            .map(|&(x, y)| point_diff(&a.devices[x], &b.devices[y]))
            .collect(),
        unpaired,
    }
}
