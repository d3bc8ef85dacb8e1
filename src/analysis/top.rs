//! `leakscope top`: what holds memory at a point of the trace, grouped by call site
//! (or user frame, file, function, stack), largest first.

use serde::Serialize;

use crate::attribute::{Attributor, frame_label};
use crate::model::{Snapshot, flags};
use crate::replay::Replay;

/// JSON schema name of [`TopReport`].
pub const SCHEMA: &str = "leakscope.top/1";

/// A point of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// After the last event (what the final `segments` hold).
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

impl At {
    /// Parses `end`, `peak`, `oom`, `event:N` or `time:US`.
    pub fn parse(s: &str) -> Result<At, String> {
        Ok(match s {
            "end" => At::End,
            "peak" => At::Peak,
            "oom" => At::Oom,
            _ => {
                if let Some(n) = s.strip_prefix("event:") {
                    At::Event(
                        n.parse()
                            .map_err(|_| format!("`{s}`: event:N needs a number"))?,
                    )
                } else if let Some(t) = s.strip_prefix("time:") {
                    At::Time(
                        t.parse()
                            .map_err(|_| format!("`{s}`: time:US needs microseconds"))?,
                    )
                } else {
                    return Err(format!("`{s}`: use end, peak, oom, event:N or time:US"));
                }
            }
        })
    }

    fn kind(self) -> &'static str {
        match self {
            At::End => "end",
            At::Peak => "peak",
            At::Oom => "oom",
            At::Event(_) => "event",
            At::Time(_) => "time",
        }
    }
}

/// The resolved point.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// `end`, `peak`, `oom`, `event` or `time`.
    pub kind: &'static str,
    /// Event index after which the state is taken (`null`: before the first event).
    pub event_index: Option<u32>,
    /// `time_us` of that event, when the file has it.
    pub time_us: Option<i64>,
    /// Live (requested) bytes at that point.
    pub live_bytes: u64,
}

/// Resolves `at` on a replayed device.
pub fn resolve(snap: &Snapshot, replay: &Replay, at: At) -> Result<Point, String> {
    let trace = snap.trace(replay.device);
    let idx =
        match at {
            At::End => replay.last_event(),
            At::Peak => replay.peak().0,
            At::Oom => Some(*replay.ooms.first().ok_or_else(|| {
                format!("device {} has no oom event in its trace", replay.device)
            })?),
            At::Event(n) => {
                if (n as usize) < replay.len() {
                    Some(n)
                } else {
                    return Err(format!(
                        "event {n} is past the end of device {}'s trace ({} events)",
                        replay.device,
                        replay.len()
                    ));
                }
            }
            At::Time(us) => {
                let timed = |i: usize| snap.meta(trace.meta[i]).has(flags::TIME);
                if !(0..trace.len()).any(timed) {
                    return Err("this file has no time_us; use event:N".into());
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
        live_bytes: replay.live_after(idx),
    }
}

/// Where a site is.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SiteInfo {
    /// Function name.
    pub name: String,
    /// File name.
    pub filename: String,
    /// Line.
    pub line: crate::model::Line,
}

/// One group of live allocations.
#[derive(Clone, Debug, Serialize)]
pub struct TopRow {
    /// The grouping key's text.
    pub key: String,
    /// The frame the key is about, when there is one.
    pub site: Option<SiteInfo>,
    /// Live requested bytes.
    pub bytes: u64,
    /// Fraction of the live bytes at this point.
    pub share: f64,
    /// Live allocations.
    pub blocks: u64,
}

/// What the rows beyond `--limit` add up to.
#[derive(Clone, Debug, Serialize, Default)]
pub struct Rest {
    /// Number of keys not shown.
    pub keys: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their allocations.
    pub blocks: u64,
}

/// The `top` report (`leakscope.top/1`).
#[derive(Clone, Debug, Serialize)]
pub struct TopReport {
    /// Schema name.
    pub schema: &'static str,
    /// Device.
    pub device: i64,
    /// The point.
    pub at: Point,
    /// Grouping key.
    pub by: &'static str,
    /// Σ bytes of all groups (equals `at.live_bytes` unless `--focus` leaves some out).
    pub total_bytes: u64,
    /// Σ allocations.
    pub total_blocks: u64,
    /// Groups, largest first.
    pub rows: Vec<TopRow>,
    /// Groups beyond the limit.
    pub rest: Rest,
}

/// Site info of a frame.
pub fn site_info(snap: &Snapshot, f: crate::model::FrameId) -> SiteInfo {
    let fr = snap.frames.get(f);
    SiteInfo {
        name: snap.strings.get(fr.name).to_string(),
        filename: snap.strings.get(fr.filename).to_string(),
        line: fr.line,
    }
}

/// Groups the allocations live at `point` by `attr`'s key.
pub fn top(replay: &Replay, point: Point, attr: &mut Attributor, limit: usize) -> TopReport {
    let snap = attr.snapshot();
    let mut sums: Vec<(u64, u64)> = Vec::new();
    for l in replay.live_set(point.event_index) {
        let Some(k) = attr.key(l.stack) else { continue };
        let k = k as usize;
        if sums.len() <= k {
            sums.resize(k + 1, (0, 0));
        }
        sums[k].0 += l.bytes;
        sums[k].1 += 1;
    }
    let mut groups: Vec<(u32, u64, u64)> = sums
        .iter()
        .enumerate()
        .filter(|(_, s)| s.1 > 0)
        .map(|(k, s)| (k as u32, s.0, s.1))
        .collect();
    // Largest first; ties by label so the order is stable.
    groups.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| attr.key_info(a.0).label.cmp(&attr.key_info(b.0).label))
    });
    let total_bytes: u64 = groups.iter().map(|g| g.1).sum();
    let total_blocks: u64 = groups.iter().map(|g| g.2).sum();
    let share = |b: u64| {
        if point.live_bytes == 0 {
            0.0
        } else {
            b as f64 / point.live_bytes as f64
        }
    };
    let mut rest = Rest::default();
    let mut rows = Vec::new();
    for (i, (k, bytes, blocks)) in groups.into_iter().enumerate() {
        if i < limit {
            let key = attr.key_info(k);
            rows.push(TopRow {
                key: key.label.clone(),
                site: key.frame.map(|f| site_info(snap, f)),
                bytes,
                share: share(bytes),
                blocks,
            });
        } else {
            rest.keys += 1;
            rest.bytes += bytes;
            rest.blocks += blocks;
        }
    }
    TopReport {
        schema: SCHEMA,
        device: replay.device,
        at: point,
        by: attr.by().name(),
        total_bytes,
        total_blocks,
        rows,
        rest,
    }
}

/// `frame_label` re-exported for renderers.
pub fn label(snap: &Snapshot, f: crate::model::FrameId) -> String {
    frame_label(snap, snap.frames.get(f))
}
