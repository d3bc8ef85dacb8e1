//! `compare A B`: what each run brings (its leak findings, what it holds at the end, its
//! backward pass), and the two put side by side device by device.

use rayon::prelude::*;
use serde::Serialize;

use super::Session;
use super::error::SessionError;
use super::options::Options;
use super::reports::schema;
use crate::analysis::compare::{self, DeviceCompare, SideInput, backward_bytes};
use crate::analysis::leaks::DeviceLeaks;
use crate::analysis::top::{self, DeviceTop};

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

/// A device of one run with no partner in the other.
#[derive(Clone, Debug, Serialize)]
pub struct Unpaired {
    /// `a` or `b`.
    pub run: &'static str,
    /// The device.
    pub device: i64,
}

/// `leakscope compare` (`leakscope.compare/3`).
#[derive(Clone, Debug, Serialize)]
pub struct CompareReport {
    /// Schema name.
    pub schema: &'static str,
    /// Run A's file.
    pub a: String,
    /// Run B's file.
    pub b: String,
    /// Each device of A against its partner in B: the same index, or the one active
    /// device of each when both have one (rank files name their own GPU).
    pub devices: Vec<DeviceCompare>,
    /// Devices with no partner.
    pub unpaired: Vec<Unpaired>,
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

/// Pairs the devices of two runs and compares each pair.
pub fn compare<'a>(a: &'a CompareSide, b: &'a CompareSide) -> CompareReport {
    let dev = |s: &SideDevice| s.leaks.device;
    let mut pairs: Vec<(&SideDevice, &SideDevice)> = Vec::new();
    if let ([x], [y]) = (a.devices.as_slice(), b.devices.as_slice()) {
        pairs.push((x, y));
    } else {
        for x in &a.devices {
            if let Some(y) = b.devices.iter().find(|y| dev(y) == dev(x)) {
                pairs.push((x, y));
            }
        }
    }
    let paired =
        |run: &'static str, side: &CompareSide, pick: fn(&(&SideDevice, &SideDevice)) -> i64| {
            side.devices
                .iter()
                .filter(|d| !pairs.iter().any(|p| pick(p) == dev(d)))
                .map(|d| Unpaired {
                    run,
                    device: dev(d),
                })
                .collect::<Vec<_>>()
        };
    let mut unpaired = paired("a", a, |p| p.0.leaks.device);
    unpaired.extend(paired("b", b, |p| p.1.leaks.device));
    let input = |file: &'a str, s: &'a SideDevice| SideInput {
        file,
        leaks: &s.leaks,
        end: &s.end,
        backward_bytes: s.backward_bytes,
    };
    let devices = pairs
        .iter()
        .map(|(x, y)| compare::compare(input(&a.file, x), input(&b.file, y)))
        .collect();
    CompareReport {
        schema: schema::COMPARE,
        a: a.file.clone(),
        b: b.file.clone(),
        devices,
        unpaired,
    }
}
