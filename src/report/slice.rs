//! `slice`'s report: what the sliced snapshot holds, device by device.

use serde::Serialize;

use crate::analysis::range::Edge;

/// One device of a slice.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SlicedDevice {
    /// Device index.
    pub device: i64,
    /// The original index of the slice's first event (`null`: no event kept).
    pub first_event: Option<u32>,
    /// Events kept.
    pub events: usize,
    /// Segments written (the state at the range's end).
    pub segments: usize,
    /// Σ segment sizes written.
    pub reserved_bytes: u64,
    /// Σ `requested_size` of the active blocks written.
    pub requested_bytes: u64,
    /// Whether the segments are the file's own (the range ends at the device's last event).
    pub final_state: bool,
    /// Events the state reconstruction could not undo (0 when the file adds up).
    pub unresolved: u64,
}

/// What a slice holds (`leakscope.slice/1`).
#[derive(Clone, Debug, Serialize)]
pub struct SliceReport {
    /// `leakscope.slice/1`.
    pub schema: &'static str,
    /// The input's name.
    pub file: String,
    /// The device the ends were resolved on.
    pub reference_device: i64,
    /// `--from` as given.
    pub from: String,
    /// `--to` as given.
    pub to: String,
    /// The event after which the range starts (`null`: before the first).
    pub from_event: Option<u32>,
    /// The range's last event.
    pub to_event: u32,
    /// The time the range starts after, on other devices.
    pub time_from: Edge,
    /// The time the range ends at, on other devices.
    pub time_to: Edge,
    /// Devices written, in index order.
    pub devices: Vec<SlicedDevice>,
    /// `external_annotations` kept.
    pub annotations: usize,
}
