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

mod set;
mod sources;
mod spec;

use crate::attribute::Attributor;
use crate::model::Snapshot;

pub use set::Windows;
pub use sources::annotation_spans;
pub use spec::{SpecError, WindowSpec, Within};

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
