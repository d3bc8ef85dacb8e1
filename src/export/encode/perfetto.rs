//! A timeline as a Perfetto trace: the protobuf `Trace` of `TracePacket`s that
//! ui.perfetto.dev and the trace processor open (`protos/perfetto/trace/perfetto_trace.proto`:
//! `TracePacket`, `TrackDescriptor`, `ProcessDescriptor`, `CounterDescriptor`,
//! `TrackEvent`, `DebugAnnotation`, `ChromeEventBundle.metadata`).
//!
//! The session layer builds a [`Timeline`] (files as processes, devices as track groups,
//! counters, nested slices, instants; timestamps already in nanoseconds); this module
//! only encodes it. Names are written inline (no interning), so any protobuf decoder
//! reads every event on its own.

use std::io::{self, Write};

use super::protobuf::Message;

/// A value shown with an event (a Perfetto debug annotation).
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// An unsigned integer.
    Uint(u64),
    /// A signed integer.
    Int(i64),
    /// Text.
    Str(String),
}

/// A counter track: its name and `(timestamp ns, bytes)` points in time order.
#[derive(Clone, Debug, Default)]
pub struct Counter {
    /// Track name.
    pub name: String,
    /// What it counts.
    pub description: String,
    /// Points.
    pub points: Vec<(i64, u64)>,
}

/// A slice (a span of time) with its arguments.
#[derive(Clone, Debug)]
pub struct Slice {
    /// Name.
    pub name: String,
    /// Start, ns.
    pub start_ns: i64,
    /// End, ns (at least the start).
    pub end_ns: i64,
    /// Debug annotations.
    pub args: Vec<(String, Arg)>,
}

/// A slice track. Its slices must nest: any two are disjoint or one holds the other
/// (the session lays crossing ranges out on separate tracks).
#[derive(Clone, Debug, Default)]
pub struct SliceTrack {
    /// Track name.
    pub name: String,
    /// What it shows.
    pub description: String,
    /// Slices, in any order.
    pub slices: Vec<Slice>,
}

/// A point event.
#[derive(Clone, Debug)]
pub struct Instant {
    /// Name (inline in the event).
    pub name: String,
    /// When, ns.
    pub ts_ns: i64,
    /// Debug annotations.
    pub args: Vec<(String, Arg)>,
}

/// One device of a file: a group of tracks.
#[derive(Clone, Debug, Default)]
pub struct DeviceTracks {
    /// Group name (`device 0`).
    pub name: String,
    /// Counter tracks.
    pub counters: Vec<Counter>,
    /// Slice tracks.
    pub slices: Vec<SliceTrack>,
    /// Name of the track of instants (OOMs, the peak, leak onsets).
    pub instants_name: String,
    /// Instants.
    pub instants: Vec<Instant>,
}

/// One file (a rank): a process.
#[derive(Clone, Debug, Default)]
pub struct ProcessTracks {
    /// Process id shown (unique in the trace).
    pub pid: i32,
    /// Process name.
    pub name: String,
    /// What the file is and how its time axis was made.
    pub description: String,
    /// Its devices.
    pub devices: Vec<DeviceTracks>,
}

/// A whole trace.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// One process per file.
    pub processes: Vec<ProcessTracks>,
    /// Trace-wide notes (in Perfetto's `metadata` table, as `cr-<name>`).
    pub metadata: Vec<(String, String)>,
}

// Field numbers, from perfetto_trace.proto.
mod field {
    pub const TRACE_PACKET: u32 = 1; // Trace.packet
    pub const TIMESTAMP: u32 = 8;
    pub const SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    pub const CHROME_EVENTS: u32 = 5;
    pub const BUNDLE_METADATA: u32 = 2; // ChromeEventBundle.metadata
    pub const META_NAME: u32 = 1; // ChromeMetadata.name
    pub const META_STRING: u32 = 2; // ChromeMetadata.string_value
    // TrackDescriptor
    pub const UUID: u32 = 1;
    pub const TRACK_NAME: u32 = 2;
    pub const PROCESS: u32 = 3;
    pub const PARENT_UUID: u32 = 5;
    pub const COUNTER: u32 = 8;
    pub const SIBLING_ORDER_RANK: u32 = 12;
    pub const CHILD_ORDERING: u32 = 11;
    pub const DESCRIPTION: u32 = 14;
    // ProcessDescriptor
    pub const PID: u32 = 1;
    pub const PROCESS_NAME: u32 = 6;
    // CounterDescriptor
    pub const UNIT: u32 = 3;
    // TrackEvent
    pub const DEBUG_ANNOTATIONS: u32 = 4;
    pub const TYPE: u32 = 9;
    pub const TRACK_UUID: u32 = 11;
    pub const EVENT_NAME: u32 = 23;
    pub const COUNTER_VALUE: u32 = 30;
    // DebugAnnotation
    pub const ARG_UINT: u32 = 3;
    pub const ARG_INT: u32 = 4;
    pub const ARG_STRING: u32 = 6;
    pub const ARG_NAME: u32 = 10;
}

const TYPE_SLICE_BEGIN: u64 = 1;
const TYPE_SLICE_END: u64 = 2;
const TYPE_INSTANT: u64 = 3;
const TYPE_COUNTER: u64 = 4;
const UNIT_SIZE_BYTES: u64 = 3;
/// `SEQ_INCREMENTAL_STATE_CLEARED`: nothing is interned, but a reader wants the first
/// packet of a sequence to say its state is fresh.
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
/// `ChildTracksOrdering.EXPLICIT`: tracks in the order written.
const ORDER_EXPLICIT: u64 = 3;
const SEQUENCE: u64 = 1;

/// Writes packets one by one to `out` as fields of a `Trace` message.
struct PacketWriter<W: Write> {
    out: W,
    packet: Message,
    body: Message,
    written: u64,
    first: bool,
}

impl<W: Write> PacketWriter<W> {
    fn emit(&mut self) -> io::Result<()> {
        self.written += self
            .packet
            .write_as_field(field::TRACE_PACKET, &mut self.out)?;
        self.packet.clear();
        Ok(())
    }

    /// A packet on the one sequence with `ts` and the track event in `self.body`.
    fn event(&mut self, ts: i64) -> io::Result<()> {
        self.packet.uint(field::TIMESTAMP, ts.max(0) as u64);
        self.packet.uint(field::SEQUENCE_ID, SEQUENCE);
        if self.first {
            self.packet
                .uint(field::SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
            self.first = false;
        }
        self.packet.message(field::TRACK_EVENT, &self.body);
        self.body.clear();
        self.emit()
    }

    fn descriptor(&mut self, d: &Message) -> io::Result<()> {
        self.packet.message(field::TRACK_DESCRIPTOR, d);
        self.emit()
    }
}

fn args_into(m: &mut Message, args: &[(String, Arg)]) {
    for (name, v) in args {
        let mut a = Message::default();
        a.string(field::ARG_NAME, name);
        match v {
            Arg::Uint(u) => a.uint(field::ARG_UINT, *u),
            Arg::Int(i) => a.int(field::ARG_INT, *i),
            Arg::Str(s) => a.string(field::ARG_STRING, s),
        }
        m.message(field::DEBUG_ANNOTATIONS, &a);
    }
}

fn track(uuid: u64, parent: Option<u64>, name: &str, description: &str, rank: i64) -> Message {
    let mut d = Message::default();
    d.uint(field::UUID, uuid);
    if let Some(p) = parent {
        d.uint(field::PARENT_UUID, p);
    }
    d.string(field::TRACK_NAME, name);
    if !description.is_empty() {
        d.string(field::DESCRIPTION, description);
    }
    d.int(field::SIBLING_ORDER_RANK, rank);
    d
}

/// Begin and end events of `slices` in an order a slice stack accepts: by start (the
/// longer first at equal starts), each end written before anything that starts at or
/// after it. `(ts, Some(slice))` begins a slice, `(ts, None)` ends the innermost.
fn stack_order(slices: &[Slice]) -> Vec<(i64, Option<&Slice>)> {
    let mut sorted: Vec<&Slice> = slices.iter().collect();
    sorted.sort_by(|a, b| {
        a.start_ns
            .cmp(&b.start_ns)
            .then_with(|| b.end_ns.cmp(&a.end_ns))
    });
    let mut out = Vec::with_capacity(2 * sorted.len());
    let mut open: Vec<i64> = Vec::new();
    for s in sorted {
        while open.last().is_some_and(|&e| e <= s.start_ns) {
            out.push((open.pop().unwrap_or(s.start_ns), None));
        }
        // A slice that outlives the one holding it is cut at its end (the session
        // lays slices out so this does not happen; the trace stays valid if it does).
        let end = open.last().map_or(s.end_ns, |&e| s.end_ns.min(e));
        out.push((s.start_ns, Some(s)));
        open.push(end.max(s.start_ns));
    }
    while let Some(e) = open.pop() {
        out.push((e, None));
    }
    out
}

/// Encodes `t` as a Perfetto trace into `out`; returns the bytes written.
///
/// ```
/// use leakscope::export::encode::perfetto::{Counter, DeviceTracks, ProcessTracks, Timeline, write};
/// let t = Timeline {
///     processes: vec![ProcessTracks {
///         pid: 1,
///         name: "rank 0".into(),
///         devices: vec![DeviceTracks {
///             name: "device 0".into(),
///             counters: vec![Counter { name: "live bytes".into(), points: vec![(0, 512)], ..Default::default() }],
///             ..Default::default()
///         }],
///         ..Default::default()
///     }],
///     metadata: vec![],
/// };
/// let mut buf = Vec::new();
/// let n = write(&t, &mut buf)?;
/// assert_eq!(n as usize, buf.len());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write(t: &Timeline, out: impl Write) -> io::Result<u64> {
    let mut w = PacketWriter {
        out,
        packet: Message::with_capacity(256),
        body: Message::with_capacity(128),
        written: 0,
        first: true,
    };
    if !t.metadata.is_empty() {
        let mut bundle = Message::default();
        for (k, v) in &t.metadata {
            let mut m = Message::default();
            m.string(field::META_NAME, k);
            m.string(field::META_STRING, v);
            bundle.message(field::BUNDLE_METADATA, &m);
        }
        w.packet.message(field::CHROME_EVENTS, &bundle);
        w.emit()?;
    }
    let mut next_uuid = 0u64;
    let mut uuid = || {
        next_uuid += 1;
        next_uuid
    };
    for p in &t.processes {
        let pu = uuid();
        let mut d = track(pu, None, &p.name, &p.description, i64::from(p.pid));
        let mut pd = Message::default();
        pd.int(field::PID, i64::from(p.pid));
        pd.string(field::PROCESS_NAME, &p.name);
        d.message(field::PROCESS, &pd);
        d.uint(field::CHILD_ORDERING, ORDER_EXPLICIT);
        w.descriptor(&d)?;
        for (di, dev) in p.devices.iter().enumerate() {
            let du = uuid();
            let mut d = track(du, Some(pu), &dev.name, "", di as i64);
            d.uint(field::CHILD_ORDERING, ORDER_EXPLICIT);
            w.descriptor(&d)?;
            let mut rank = 0i64;
            let mut child = |name: &str, description: &str, counter: bool| -> (u64, Message) {
                let u = uuid();
                let mut d = track(u, Some(du), name, description, rank);
                rank += 1;
                if counter {
                    let mut c = Message::default();
                    c.uint(field::UNIT, UNIT_SIZE_BYTES);
                    d.message(field::COUNTER, &c);
                }
                (u, d)
            };
            // Instants first (above the counters), then counters, then slices.
            let (instants_uuid, d) = child(&dev.instants_name, "", false);
            w.descriptor(&d)?;
            let mut counter_uuids = Vec::with_capacity(dev.counters.len());
            for c in &dev.counters {
                let (u, d) = child(&c.name, &c.description, true);
                counter_uuids.push(u);
                w.descriptor(&d)?;
            }
            let mut slice_uuids = Vec::with_capacity(dev.slices.len());
            for s in &dev.slices {
                let (u, d) = child(&s.name, &s.description, false);
                slice_uuids.push(u);
                w.descriptor(&d)?;
            }
            for i in &dev.instants {
                w.body.uint(field::TYPE, TYPE_INSTANT);
                w.body.uint(field::TRACK_UUID, instants_uuid);
                w.body.string(field::EVENT_NAME, &i.name);
                args_into(&mut w.body, &i.args);
                w.event(i.ts_ns)?;
            }
            for (c, &cu) in dev.counters.iter().zip(&counter_uuids) {
                for &(ts, v) in &c.points {
                    w.body.uint(field::TYPE, TYPE_COUNTER);
                    w.body.uint(field::TRACK_UUID, cu);
                    w.body
                        .int(field::COUNTER_VALUE, v.min(i64::MAX as u64) as i64);
                    w.event(ts)?;
                }
            }
            for (s, &su) in dev.slices.iter().zip(&slice_uuids) {
                for (ts, what) in stack_order(&s.slices) {
                    match what {
                        Some(sl) => {
                            w.body.uint(field::TYPE, TYPE_SLICE_BEGIN);
                            w.body.uint(field::TRACK_UUID, su);
                            w.body.string(field::EVENT_NAME, &sl.name);
                            args_into(&mut w.body, &sl.args);
                        }
                        None => {
                            w.body.uint(field::TYPE, TYPE_SLICE_END);
                            w.body.uint(field::TRACK_UUID, su);
                        }
                    }
                    w.event(ts)?;
                }
            }
        }
    }
    w.out.flush()?;
    Ok(w.written)
}
