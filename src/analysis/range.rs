//! The ends of a range of a device's trace (`slice --from/--to`): a point of the trace
//! ([`At`]) or its start, moved by a number of events (`peak-1000`), resolved to the
//! event after which the range's state is taken and the time that bounds it.

use std::fmt;
use std::str::FromStr;

use crate::analysis::point::{self, At, AtError, PointError};
use crate::model::{Snapshot, flags};
use crate::replay::Replay;

/// One end of a range: `start`, a point (`end`, `peak`, `oom`, `event:N`, `time:US`), or
/// `start`/`end`/`peak`/`oom`/`event:N` moved by N events (`peak-1000`, `event:50+10`).
///
/// ```
/// use leakscope::analysis::range::Bound;
/// use leakscope::analysis::At;
/// assert_eq!("start".parse::<Bound>(), Ok(Bound { at: None, offset: 0 }));
/// assert_eq!("peak-1000".parse::<Bound>(), Ok(Bound { at: Some(At::Peak), offset: -1000 }));
/// assert_eq!("event:5+2".parse::<Bound>(), Ok(Bound { at: Some(At::Event(5)), offset: 2 }));
/// assert_eq!("time:-5".parse::<Bound>(), Ok(Bound { at: Some(At::Time(-5)), offset: 0 }));
/// assert!("peak+".parse::<Bound>().is_err());
/// assert!("soon".parse::<Bound>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The point; `None`: before the first event (`start`).
    pub at: Option<At>,
    /// Events to move by (negative: earlier); the result is kept inside the trace.
    pub offset: i64,
}

/// A `--from`/`--to` value that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    /// Not one of the forms.
    #[error(
        "`{0}`: use start, end, peak, oom, event:N or time:US, optionally moved by events (peak-1000, event:N+10; not time:US)"
    )]
    Unknown(String),
    /// The point part is not one.
    #[error("{0}")]
    At(#[from] AtError),
    /// `+`/`-` without a number of events.
    #[error("`{0}`: the offset after + or - must be a number of events")]
    Offset(String),
}

impl FromStr for Bound {
    type Err = BoundError;

    fn from_str(s: &str) -> Result<Bound, BoundError> {
        let base = |b: &str| -> Result<Option<At>, BoundError> {
            match b {
                "start" => Ok(None),
                _ => Ok(Some(b.parse::<At>()?)),
            }
        };
        // A time may be negative and takes no offset: the whole text is the point.
        if s.starts_with("time:") {
            return Ok(Bound {
                at: Some(s.parse()?),
                offset: 0,
            });
        }
        match s.rfind(['+', '-']) {
            Some(i) if i > 0 => {
                let (b, off) = s.split_at(i);
                let offset = off
                    .parse::<i64>()
                    .map_err(|_| BoundError::Offset(s.to_string()))?;
                let at = base(b).map_err(|_| BoundError::Unknown(s.to_string()))?;
                Ok(Bound { at, offset })
            }
            _ => Ok(Bound {
                at: base(s).map_err(|e| match e {
                    BoundError::At(AtError::Unknown(_)) => BoundError::Unknown(s.to_string()),
                    other => other,
                })?,
                offset: 0,
            }),
        }
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            None => f.write_str("start")?,
            Some(at) => write!(f, "{at}")?,
        }
        if self.offset != 0 {
            write!(f, "{:+}", self.offset)?;
        }
        Ok(())
    }
}

impl Bound {
    /// Before the first event.
    pub const START: Bound = Bound {
        at: None,
        offset: 0,
    };
    /// After the last event.
    pub const END: Bound = Bound {
        at: Some(At::End),
        offset: 0,
    };
}

/// Why a range does not fit a file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// An end names a point the reference device does not have.
    #[error("--{end} {bound}: {source}")]
    Point {
        /// `from` or `to`.
        end: &'static str,
        /// The bound asked for.
        bound: Bound,
        /// Why.
        source: PointError,
    },
    /// `--from` is not before `--to`.
    #[error(
        "--from {from} ({}) is not before --to {to} ({}): the range holds no event",
        after(*from_event), after(*to_event)
    )]
    Empty {
        /// The start asked for.
        from: Bound,
        /// The end asked for.
        to: Bound,
        /// Where it resolved.
        from_event: Option<u32>,
        /// Where it resolved.
        to_event: Option<u32>,
    },
    /// The reference device has no events.
    #[error("device {device} has no trace events to slice")]
    NoEvents {
        /// The device.
        device: i64,
    },
    /// Another device has events but the range's ends carry no `time_us`.
    #[error(
        "device {device} has trace events but the range's ends have no time_us to place them by; pass --device to slice one device"
    )]
    Untimed {
        /// The device.
        device: i64,
    },
}

fn after(e: Option<u32>) -> String {
    e.map_or("before the first event".into(), |i| {
        format!("after event {i}")
    })
}

/// A time that bounds a range on the other devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Edge {
    /// No bound: the start or the end of every trace.
    Open,
    /// This `time_us`.
    At(i64),
    /// The event has no `time_us`: other devices cannot be placed against it.
    Untimed,
}

/// A resolved end of a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// The event after which the state is taken (`None`: before the first event).
    pub after: Option<u32>,
    /// The time that bounds the range on other devices.
    pub time: Edge,
}

/// Resolves `b` on a replayed device; an offset is kept inside the trace (`peak-1000`
/// near the start is the start).
pub fn resolve(snap: &Snapshot, replay: &Replay, b: Bound) -> Result<Cut, PointError> {
    let trace = snap.trace(replay.device);
    let time_of = |i: u32| {
        let i = i as usize;
        match trace.meta.get(i) {
            Some(&m) if snap.meta(m).has(flags::TIME) => Edge::At(trace.time_us[i]),
            _ => Edge::Untimed,
        }
    };
    let idx = match b.at {
        None => None,
        Some(at) => point::resolve(snap, replay, at)?.event_index,
    };
    if b.offset == 0 {
        let time = match (b.at, idx) {
            (None | Some(At::End), _) | (_, None) => Edge::Open,
            (Some(At::Time(us)), _) => Edge::At(us),
            (_, Some(i)) => time_of(i),
        };
        return Ok(Cut { after: idx, time });
    }
    let last = replay.len() as i64 - 1;
    let moved = idx
        .map_or(-1, i64::from)
        .saturating_add(b.offset)
        .clamp(-1, last);
    let after = u32::try_from(moved).ok();
    Ok(Cut {
        after,
        time: after.map_or(Edge::Open, time_of),
    })
}
