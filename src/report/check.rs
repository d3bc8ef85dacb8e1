//! `check`'s report: every limit of a budget, passed or not, per device and file.

use serde::Serialize;

use super::schema;
use crate::budget::gate::{Case, Measured};

/// One device's check.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceCheck {
    /// The device.
    pub device: i64,
    /// What it measured.
    pub measured: Measured,
    /// Every limit, passed or not.
    pub cases: Vec<Case>,
}

/// One file's check.
#[derive(Clone, Debug, Serialize)]
pub struct FileCheck {
    /// The file.
    pub file: String,
    /// Every selected device that has segments or trace events.
    pub devices: Vec<DeviceCheck>,
    /// Devices whose trace and final state disagree (see `PerDevice::disagreements`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disagreements: Vec<crate::replay::Consistency>,
}

impl FileCheck {
    /// Whether every case of every device passed.
    pub fn passed(&self) -> bool {
        self.devices
            .iter()
            .all(|d| d.cases.iter().all(|c| c.passed))
    }
}

/// `leakscope check` (`leakscope.check/5`).
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// Schema name.
    pub schema: &'static str,
    /// Every file checked.
    pub files: Vec<FileCheck>,
    /// Whether every case passed.
    pub passed: bool,
}

impl CheckReport {
    /// The report of these files' checks.
    pub fn new(files: Vec<FileCheck>) -> CheckReport {
        CheckReport {
            schema: schema::CHECK,
            passed: files.iter().all(FileCheck::passed),
            files,
        }
    }
}
