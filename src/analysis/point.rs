//! A point of a device's trace (`--at`): the end, the peak, the OOM, an event, a time.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::model::{Snapshot, flags};
use crate::replay::Replay;

/// A point of the trace.
///
/// ```
/// use leakscope::analysis::At;
/// assert_eq!("event:12".parse::<At>(), Ok(At::Event(12)));
/// assert!("event:x".parse::<At>().is_err());
/// assert!(matches!(
///     "event:4294967296".parse::<At>(),
///     Err(leakscope::analysis::AtError::EventOutOfRange(_))
/// ));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum At {
    /// After the last event (what the final `segments` hold).
    #[default]
    End,
    /// After the event with the most live bytes (the first one, on ties).
    Peak,
    /// At the first `oom` event.
    Oom,
    /// After event N (0-based index into the device's trace).
    Event(u32),
    /// After the last event whose `time_us` is at most this.
    Time(i64),
}

/// An `--at` value that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AtError {
    /// Not one of the forms.
    #[error("`{0}`: use end, peak, oom, event:N or time:US")]
    Unknown(String),
    /// `event:` without an event index.
    #[error("`{0}`: event:N needs an event index (0 or more)")]
    Event(String),
    /// `event:N` with N past the largest event index any trace can have (2^32 - 1).
    #[error("`{0}`: the event index is out of range (traces hold at most 2^32 events)")]
    EventOutOfRange(String),
    /// `time:` without microseconds.
    #[error("`{0}`: time:US needs microseconds (an integer)")]
    Time(String),
}

impl FromStr for At {
    type Err = AtError;

    fn from_str(s: &str) -> Result<At, AtError> {
        Ok(match s {
            "end" => At::End,
            "peak" => At::Peak,
            "oom" => At::Oom,
            _ => {
                if let Some(n) = s.strip_prefix("event:") {
                    At::Event(n.parse().map_err(|_| {
                        // All digits but too large for an index: say so, not "needs an index".
                        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                            AtError::EventOutOfRange(s.to_string())
                        } else {
                            AtError::Event(s.to_string())
                        }
                    })?)
                } else if let Some(t) = s.strip_prefix("time:") {
                    At::Time(t.parse().map_err(|_| AtError::Time(s.to_string()))?)
                } else {
                    return Err(AtError::Unknown(s.to_string()));
                }
            }
        })
    }
}

impl At {
    /// The kind as reports name it: `end`, `peak`, `oom`, `event` or `time`.
    pub fn kind(self) -> &'static str {
        match self {
            At::End => "end",
            At::Peak => "peak",
            At::Oom => "oom",
            At::Event(_) => "event",
            At::Time(_) => "time",
        }
    }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Event(n) => write!(f, "event:{n}"),
            At::Time(t) => write!(f, "time:{t}"),
            other => f.write_str(other.kind()),
        }
    }
}

impl Serialize for At {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Why a point does not exist on a device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PointError {
    /// `--at oom` on a device without an `oom` event.
    #[error("device {device} has no oom event in its trace")]
    NoOom {
        /// The device.
        device: i64,
    },
    /// `--at event:N` past the device's trace.
    #[error("event {event} is past the end of device {device}'s trace ({events} events)")]
    PastEnd {
        /// The event asked for.
        event: u32,
        /// The device.
        device: i64,
        /// Its events.
        events: usize,
    },
    /// `--at time:US` on a file without `time_us`.
    #[error("device {device}'s trace has no time_us; use event:N")]
    NoTime {
        /// The device.
        device: i64,
    },
}

/// The resolved point.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Point {
    /// `end`, `peak`, `oom`, `event` or `time`.
    pub kind: &'static str,
    /// Event index after which the state is taken (`null`: before the first event).
    pub event_index: Option<u32>,
    /// `time_us` of that event, when the file has it.
    pub time_us: Option<i64>,
    /// Live (requested) bytes at that point.
    pub requested_bytes: u64,
}

/// Resolves `at` on a replayed device.
pub fn resolve(snap: &Snapshot, replay: &Replay, at: At) -> Result<Point, PointError> {
    let device = replay.device;
    let trace = snap.trace(device);
    let idx = match at {
        At::End => replay.last_event(),
        At::Peak => replay.peak().0,
        At::Oom => Some(*replay.ooms.first().ok_or(PointError::NoOom { device })?),
        At::Event(n) if (n as usize) < replay.len() => Some(n),
        At::Event(event) => {
            return Err(PointError::PastEnd {
                event,
                device,
                events: replay.len(),
            });
        }
        At::Time(us) => {
            let timed = |i: usize| snap.meta(trace.meta[i]).has(flags::TIME);
            if !(0..trace.len()).any(timed) {
                return Err(PointError::NoTime { device });
            }
            (0..trace.len())
                .rev()
                .find(|&i| timed(i) && trace.time_us[i] <= us)
                .map(|i| i as u32)
        }
    };
    Ok(point_after(snap, replay, at, idx))
}

/// The point after event `idx` (`None`: before the first event), named as `at`. The peak
/// and the end always exist: `point_after(snap, r, At::Peak, r.peak().0)`.
pub fn point_after(snap: &Snapshot, replay: &Replay, at: At, idx: Option<u32>) -> Point {
    let trace = snap.trace(replay.device);
    let time_us = idx
        .map(|i| i as usize)
        .filter(|&i| snap.meta(trace.meta[i]).has(flags::TIME))
        .map(|i| trace.time_us[i]);
    Point {
        kind: at.kind(),
        event_index: idx,
        time_us,
        requested_bytes: replay.requested_after(idx),
    }
}
