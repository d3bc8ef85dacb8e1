//! A baseline for `check --baseline`: the numbers an earlier run measured, read from the
//! JSON of `leakscope check` or `leakscope leaks` (any schema version), per device.

use serde_json::Value;

use super::gate::Measured;
use crate::attribute::Site;

/// Why a baseline file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// Not JSON.
    #[error("not JSON: {0}")]
    Json(String),
    /// JSON of something else.
    #[error("not the JSON of `leakscope check` or `leakscope leaks` (schema {0})")]
    Schema(String),
    /// A field with the wrong type.
    #[error("{0} is missing or not a number")]
    Field(String),
}

/// What an earlier run measured, per device (`None`: a file of one unnamed device).
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    /// Device and its numbers.
    pub devices: Vec<(Option<i64>, Measured)>,
}

fn num(v: &Value, path: &str) -> Result<u64, BaselineError> {
    v.as_u64()
        .ok_or_else(|| BaselineError::Field(path.to_string()))
}

/// A site as either schema wrote it: the object of version 2, the label string of 1.
fn site(v: &Value) -> Option<Site> {
    match v {
        Value::String(s) => Some(Site::label_only(s.clone())),
        Value::Object(o) => Some(Site {
            name: o.get("name").and_then(Value::as_str).map(str::to_owned),
            filename: o.get("filename").and_then(Value::as_str).map(str::to_owned),
            line: o.get("line").and_then(Value::as_i64),
            label: o.get("label")?.as_str()?.to_owned(),
        }),
        _ => None,
    }
}

/// A `check` report's measurements; `peak` names the peak of requested bytes
/// (`peak_requested`, `peak_allocated` before version 4, which measured the same).
fn measured(m: &Value, path: &str, peak: &str) -> Result<Measured, BaselineError> {
    let field = |k: &str| num(&m[k], &format!("{path}.{k}"));
    Ok(Measured {
        peak_requested_by_role: Vec::new(),
        max_bytes_per_window: field("max_bytes_per_window")?,
        max_site: site(&m["max_site"]),
        peak_requested: field(peak)?,
        peak_reserved: m["peak_reserved"].as_u64().unwrap_or(0),
        end_allocated: field("end_allocated")?,
        end_reserved: field("end_reserved")?,
    })
}

/// The largest suspect of a leak report's JSON: only growth is known there.
fn from_suspects(suspects: &Value) -> Measured {
    let top = suspects
        .as_array()
        .into_iter()
        .flatten()
        .max_by_key(|g| g["bytes_per_window"].as_u64().unwrap_or(0));
    Measured {
        peak_requested_by_role: Vec::new(),
        max_bytes_per_window: top
            .and_then(|g| g["bytes_per_window"].as_u64())
            .unwrap_or(0),
        max_site: top.and_then(|g| site(&g["site"]).or_else(|| site(&g["key"]))),
        peak_requested: 0,
        peak_reserved: 0,
        end_allocated: 0,
        end_reserved: 0,
    }
}

impl Baseline {
    /// Reads the JSON text of an earlier `check --json` (its first file) or `leaks --json`.
    pub fn from_json(text: &str) -> Result<Baseline, BaselineError> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| BaselineError::Json(e.to_string()))?;
        let schema = v["schema"].as_str().unwrap_or("");
        let mut devices = Vec::new();
        let device = |d: &Value| d["device"].as_i64();
        match schema {
            "leakscope.check/1" => devices.push((
                None,
                measured(
                    &v["files"][0]["measured"],
                    "files[0].measured",
                    "peak_allocated",
                )?,
            )),
            "leakscope.check/2" | "leakscope.check/3" | "leakscope.check/5" => {
                let peak = if schema == "leakscope.check/5" {
                    "peak_requested"
                } else {
                    "peak_allocated"
                };
                for (i, d) in v["files"][0]["devices"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    let path = format!("files[0].devices[{i}].measured");
                    devices.push((device(d), measured(&d["measured"], &path, peak)?));
                }
            }
            "leakscope.leaks/1" => devices.push((device(&v), from_suspects(&v["suspects"]))),
            "leakscope.leaks/2" | "leakscope.leaks/3" | "leakscope.leaks/5"
            | "leakscope.leaks/6" | "leakscope.leaks/7" | "leakscope.leaks/8" => {
                for d in v["devices"].as_array().into_iter().flatten() {
                    devices.push((device(d), from_suspects(&d["suspects"])));
                }
            }
            other => return Err(BaselineError::Schema(other.to_string())),
        }
        Ok(Baseline { devices })
    }

    /// The numbers for `device`: its own, else those of a baseline of one device.
    pub fn for_device(&self, device: i64) -> Option<&Measured> {
        self.devices
            .iter()
            .find(|(d, _)| *d == Some(device))
            .or_else(|| (self.devices.len() == 1).then(|| &self.devices[0]))
            .map(|(_, m)| m)
    }
}
