//! Writes a [`Snapshot`] back out as the dict PyTorch pickles ([`to_snapshot_value`]):
//! as snapshot-shaped JSON (tuples as arrays), so `convert` round-trips pickle → cache →
//! JSON → cache exactly, and as a pickle (`slice`, through [`crate::render::pickle`]).

use serde_json::Value as J;

use crate::model::{
    Annotation, Block, EventMeta, Extra, Layout, Segment, Snapshot, StackId, Trace, Value, flags,
};

/// A dict under construction, keys in insertion order (a key set twice keeps its first
/// place and its last value, as a Python dict does).
#[derive(Default)]
struct Map(Vec<(Value, Value)>);

impl Map {
    fn new() -> Map {
        Map::default()
    }

    fn insert(&mut self, k: String, v: Value) {
        match self
            .0
            .iter_mut()
            .find(|(key, _)| key.as_str() == Some(k.as_str()))
        {
            Some(slot) => slot.1 = v,
            None => self.0.push((Value::Str(k), v)),
        }
    }
}

/// An unsigned number as the file holds it: a signed integer when it fits.
fn uint(v: u64) -> Value {
    i64::try_from(v).map_or(Value::UInt(v), Value::Int)
}

fn str_v(s: &str) -> Value {
    Value::Str(s.to_string())
}

fn put_extra(m: &mut Map, extra: &Extra) {
    for (k, v) in extra {
        m.insert(k.clone(), v.clone());
    }
}

fn stack_value(snap: &Snapshot, id: StackId) -> Value {
    Value::List(
        snap.stacks
            .get(id)
            .iter()
            .map(|&f| {
                let fr = snap.frames.get(f);
                let mut m = Map::new();
                m.insert("name".into(), str_v(snap.strings.get(fr.name)));
                m.insert("filename".into(), str_v(snap.strings.get(fr.filename)));
                m.insert(
                    "line".into(),
                    match fr.line.known() {
                        Some(v) => Value::Int(v),
                        None => Value::UInt(fr.line.value() as u64),
                    },
                );
                put_extra(&mut m, &fr.extra);
                Value::Map(m.0)
            })
            .collect(),
    )
}

fn opt_stack(m: &mut Map, snap: &Snapshot, s: Option<StackId>) {
    if let Some(s) = s {
        m.insert("frames".into(), stack_value(snap, s));
    }
}

fn block_value(snap: &Snapshot, b: &Block) -> Value {
    let mut m = Map::new();
    if b.address_in_file {
        m.insert("address".into(), uint(b.address));
    }
    m.insert("size".into(), uint(b.size));
    if let Some(r) = b.requested_size {
        m.insert("requested_size".into(), uint(r));
    }
    m.insert("state".into(), str_v(b.state.as_str()));
    opt_stack(&mut m, snap, b.stack);
    if let Some(h) = &b.history {
        let entries = h
            .iter()
            .map(|e| {
                let mut hm = Map::new();
                hm.insert("addr".into(), uint(e.addr));
                hm.insert("real_size".into(), uint(e.real_size));
                opt_stack(&mut hm, snap, e.stack);
                put_extra(&mut hm, &e.extra);
                Value::Map(hm.0)
            })
            .collect();
        m.insert("history".into(), Value::List(entries));
    }
    put_extra(&mut m, &b.extra);
    Value::Map(m.0)
}

fn segment_value(snap: &Snapshot, s: &Segment) -> Value {
    let mut m = Map::new();
    if let Some(d) = s.device {
        m.insert("device".into(), Value::Int(d));
    }
    m.insert("address".into(), uint(s.address));
    m.insert("total_size".into(), uint(s.total_size));
    for (k, v) in [
        ("allocated_size", s.allocated_size),
        ("active_size", s.active_size),
        ("requested_size", s.requested_size),
    ] {
        if let Some(v) = v {
            m.insert(k.into(), uint(v));
        }
    }
    if let Some(st) = s.stream {
        m.insert("stream".into(), Value::Int(st));
    }
    let pool = |m: &mut Map| {
        if let Some(p) = &s.pool_id {
            m.insert("segment_pool_id".into(), p.clone());
        }
    };
    if s.npu_key_order {
        pool(&mut m);
    }
    if let Some(t) = &s.segment_type {
        m.insert("segment_type".into(), Value::Str(t.clone()));
    }
    if !s.npu_key_order {
        pool(&mut m);
    }
    if let Some(e) = s.is_expandable {
        m.insert("is_expandable".into(), Value::Bool(e));
    }
    opt_stack(&mut m, snap, s.stack);
    m.insert(
        "blocks".into(),
        Value::List(s.blocks.iter().map(|b| block_value(snap, b)).collect()),
    );
    put_extra(&mut m, &s.extra);
    Value::Map(m.0)
}

fn event_value(snap: &Snapshot, t: &Trace, i: usize) -> Value {
    let meta: &EventMeta = snap.meta(t.meta[i]);
    let mut m = Map::new();
    m.insert("action".into(), str_v(snap.actions.name(t.action[i])));
    let addr = uint(t.addr[i]);
    if meta.has(flags::ADDR) {
        m.insert("addr".into(), addr);
    } else if meta.has(flags::DEVICE_FREE) {
        m.insert("device_free".into(), addr);
    }
    if meta.has(flags::SIZE) {
        m.insert("size".into(), uint(t.size[i]));
    }
    if meta.has(flags::STREAM) {
        let stream = if meta.has(flags::STREAM_UNSIGNED) {
            Value::UInt(meta.stream as u64)
        } else {
            Value::Int(meta.stream)
        };
        m.insert("stream".into(), stream);
    }
    let time = meta.has(flags::TIME).then(|| Value::Int(t.time_us[i]));
    if !meta.has(flags::TIME_LATE)
        && let Some(tv) = time.clone()
    {
        m.insert("time_us".into(), tv);
    }
    if let Some(c) = &meta.compile_context {
        m.insert("compile_context".into(), Value::Str(c.clone()));
    }
    if let Some(u) = &meta.user_metadata {
        m.insert("user_metadata".into(), Value::Str(u.clone()));
    }
    if meta.has(flags::TIME_LATE)
        && let Some(tv) = time
    {
        m.insert("time_us".into(), tv);
    }
    if let Some(p) = &meta.pool_id {
        m.insert("pool_id".into(), p.clone());
    }
    if meta.has(flags::FRAMES) {
        m.insert("frames".into(), stack_value(snap, t.stack[i]));
    }
    put_extra(&mut m, &meta.extra);
    Value::Map(m.0)
}

fn traces_value(snap: &Snapshot, traces: &[Trace]) -> Value {
    Value::List(
        traces
            .iter()
            .map(|t| Value::List((0..t.len()).map(|i| event_value(snap, t, i)).collect()))
            .collect(),
    )
}

fn annotation_value(a: &Annotation) -> Value {
    let mut m = Map::new();
    if let Some(s) = &a.stage {
        m.insert("stage".into(), Value::Str(s.clone()));
    }
    if let Some(n) = &a.name {
        m.insert("name".into(), Value::Str(n.clone()));
    }
    if let Some(d) = a.device {
        m.insert("device".into(), Value::Int(d));
    }
    if let Some(t) = a.time_us {
        m.insert("time_us".into(), Value::Int(t));
    }
    put_extra(&mut m, &a.extra);
    Value::Map(m.0)
}

/// The snapshot as the value of the dict (or list) PyTorch wrote: tuples stay tuples,
/// top-level keys in file order.
pub fn to_snapshot_value(snap: &Snapshot) -> Value {
    let segments = Value::List(
        snap.segments
            .iter()
            .map(|s| segment_value(snap, s))
            .collect(),
    );
    if snap.layout == Layout::SegmentList {
        return segments;
    }
    let mut m = Map::new();
    let mut segments = Some(segments);
    for key in &snap.top_keys {
        let v = match key.as_str() {
            "segments" => segments.take(),
            "device_traces" => snap.device_traces.as_ref().map(|t| traces_value(snap, t)),
            "host_traces" => snap.host_traces.as_ref().map(|t| traces_value(snap, t)),
            "allocator_settings" => snap.allocator_settings.clone(),
            "host_segments" => snap.host_segments.clone(),
            "external_annotations" => snap
                .external_annotations
                .as_ref()
                .map(|a| Value::List(a.iter().map(annotation_value).collect())),
            other => snap
                .extra
                .iter()
                .find(|(k, _)| k == other)
                .map(|(_, v)| v.clone()),
        };
        if let Some(v) = v {
            m.insert(key.clone(), v);
        }
    }
    Value::Map(m.0)
}

/// The snapshot as the JSON value of the dict (or list) PyTorch wrote (tuples as arrays).
pub fn to_snapshot_json(snap: &Snapshot) -> J {
    to_snapshot_value(snap).into_json()
}

/// Writes [`to_snapshot_json`] to `w`.
pub fn write_json(snap: &Snapshot, w: impl std::io::Write) -> Result<(), crate::error::WriteError> {
    serde_json::to_writer(w, &to_snapshot_json(snap)).map_err(|e| {
        crate::error::WriteError::Encode {
            what: "the snapshot as JSON",
            message: e.to_string(),
        }
    })
}
