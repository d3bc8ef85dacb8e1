//! Stage 4, `windows`: cutting a device's trace into repeated units of work
//! (micro-batches), so growth can be measured per unit.
//!
//! Sources, as `--windows SPEC`: `annotation[:REGEX]` (a window per matching
//! `record_function` START in `external_annotations`), `metadata` (a window per change of
//! `user_metadata`), `frame:REGEX` (a window starts at each allocation whose filtered
//! stack has a frame whose function matches, when the previous allocation's had none),
//! `every:N` events, and `auto`. A window runs from its start to the next window's start
//! (the last one to the end of the trace), so every event after the first start belongs
//! to exactly one window.

mod sources;
mod spec;

use serde::Serialize;

use crate::attribute::Attributor;
use crate::model::Snapshot;

pub use sources::annotation_spans;
pub use spec::{SpecError, WindowSpec, Within};

/// The windows of one device.
#[derive(Clone, Debug, Serialize)]
pub struct Windows {
    /// The device.
    pub device: i64,
    /// `annotation`, `metadata`, `frame`, `every` or `whole-trace`.
    pub source: String,
    /// What was matched, in words (the annotation pattern, the function, N).
    pub detail: String,
    /// Why this source was chosen (for `auto`) or how it was read.
    pub reason: String,
    /// The windows are `auto`'s guess from a repeating function (no annotations or
    /// metadata said what a step is): they may be layers rather than micro-batches.
    pub guessed: bool,
    /// Event index where each window starts, increasing.
    pub starts: Vec<u32>,
    /// Where each window ends (exclusive): the next start, or the end of a `--within`
    /// phase. Empty means "the next start, or the end of the trace".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ends: Vec<u32>,
    /// Events in the trace (the last window ends there).
    pub events: u32,
    /// A name per window (the annotation name, the metadata value), when there is one.
    pub names: Vec<String>,
}

impl Windows {
    /// Number of windows.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// True when there is no window.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Event range `[start, end)` of window `k`.
    pub fn range(&self, k: usize) -> (u32, u32) {
        let end = match self.ends.get(k) {
            Some(&e) => e,
            None => self.starts.get(k + 1).copied().unwrap_or(self.events),
        };
        (self.starts[k], end)
    }

    /// The window holding event `i` (`None` outside every window).
    pub fn of_event(&self, i: u32) -> Option<usize> {
        let k = match self.starts.binary_search(&i) {
            Ok(k) => k,
            Err(0) => return None,
            Err(k) => k - 1,
        };
        (i < self.range(k).1).then_some(k)
    }

    /// Keeps the windows that start inside one of `spans` (`[start, end)` event ranges),
    /// each cut at the end of its span: `--within` a phase of every step.
    pub fn restrict(&self, spans: &[(u32, u32)], what: &str) -> Windows {
        let mut w = Windows {
            starts: Vec::new(),
            ends: Vec::new(),
            names: Vec::new(),
            reason: format!("{}; within {what}", self.reason),
            ..self.clone()
        };
        for k in 0..self.len() {
            let (s, e) = self.range(k);
            if let Some(&(_, se)) = spans.iter().find(|(a, b)| *a <= s && s < *b) {
                w.starts.push(s);
                w.ends.push(e.min(se));
                w.names.push(self.names.get(k).cloned().unwrap_or_default());
            }
        }
        w
    }
}

/// Cuts device `device`'s trace into windows per `spec`. With nothing to go by, the
/// whole trace is one window (and `reason` says so).
pub fn windows(snap: &Snapshot, device: i64, spec: &WindowSpec, attr: &Attributor) -> Windows {
    let events = snap.trace(device).len() as u32;
    let found = match spec {
        WindowSpec::Annotation(re) => sources::annotation_windows(snap, device, re.as_ref()),
        WindowSpec::Metadata => sources::metadata_windows(snap, device),
        WindowSpec::Frame(re) => sources::frame_windows(snap, device, attr, re),
        WindowSpec::Every(n) => Some(Windows {
            device,
            guessed: false,
            source: "every".into(),
            detail: n.to_string(),
            reason: format!("every {n} events"),
            starts: (0..events).step_by(*n as usize).collect(),
            ends: Vec::new(),
            names: vec![String::new(); events.div_ceil(*n) as usize],
            events,
        }),
        WindowSpec::Auto => sources::annotation_windows(snap, device, None)
            .or_else(|| sources::metadata_windows(snap, device))
            .or_else(|| sources::period_windows(snap, device, attr)),
    };
    found.filter(|w| !w.is_empty()).unwrap_or_else(|| Windows {
        device,
        guessed: false,
        source: "whole-trace".into(),
        detail: String::new(),
        reason: "nothing to cut the trace by (no matching annotations, metadata or repeating function): the whole trace is one window".into(),
        starts: vec![0],
        ends: Vec::new(),
        names: vec![String::new()],
        events,
    })
}
