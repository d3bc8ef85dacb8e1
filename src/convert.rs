//! Writes a [`Snapshot`] back out as snapshot-shaped JSON (the same dict PyTorch pickles,
//! tuples as arrays), so `convert` round-trips pickle → cache → JSON → cache exactly.

use serde_json::{Map, Value as J};

use crate::model::{
    Annotation, Block, EventMeta, Extra, Layout, Segment, Snapshot, StackId, Trace, Value, flags,
};

fn put_extra(m: &mut Map<String, J>, extra: &Extra) {
    for (k, v) in extra {
        m.insert(k.clone(), v.to_json());
    }
}

fn stack_json(snap: &Snapshot, id: StackId) -> J {
    J::Array(
        snap.stacks
            .get(id)
            .iter()
            .map(|&f| {
                let fr = snap.frames.get(f);
                let mut m = Map::new();
                m.insert("name".into(), J::String(snap.strings.get(fr.name).into()));
                m.insert(
                    "filename".into(),
                    J::String(snap.strings.get(fr.filename).into()),
                );
                m.insert(
                    "line".into(),
                    match fr.line.known() {
                        Some(v) => J::from(v),
                        None => J::from(fr.line.value() as u64),
                    },
                );
                put_extra(&mut m, &fr.extra);
                J::Object(m)
            })
            .collect(),
    )
}

fn opt_stack(m: &mut Map<String, J>, snap: &Snapshot, s: Option<StackId>) {
    if let Some(s) = s {
        m.insert("frames".into(), stack_json(snap, s));
    }
}

fn block_json(snap: &Snapshot, b: &Block) -> J {
    let mut m = Map::new();
    if b.address_in_file {
        m.insert("address".into(), J::from(b.address));
    }
    m.insert("size".into(), J::from(b.size));
    if let Some(r) = b.requested_size {
        m.insert("requested_size".into(), J::from(r));
    }
    m.insert("state".into(), J::String(b.state.as_str().into()));
    opt_stack(&mut m, snap, b.stack);
    if let Some(h) = &b.history {
        let entries = h
            .iter()
            .map(|e| {
                let mut hm = Map::new();
                hm.insert("addr".into(), J::from(e.addr));
                hm.insert("real_size".into(), J::from(e.real_size));
                opt_stack(&mut hm, snap, e.stack);
                put_extra(&mut hm, &e.extra);
                J::Object(hm)
            })
            .collect();
        m.insert("history".into(), J::Array(entries));
    }
    put_extra(&mut m, &b.extra);
    J::Object(m)
}

fn segment_json(snap: &Snapshot, s: &Segment) -> J {
    let mut m = Map::new();
    if let Some(d) = s.device {
        m.insert("device".into(), J::from(d));
    }
    m.insert("address".into(), J::from(s.address));
    m.insert("total_size".into(), J::from(s.total_size));
    for (k, v) in [
        ("allocated_size", s.allocated_size),
        ("active_size", s.active_size),
        ("requested_size", s.requested_size),
    ] {
        if let Some(v) = v {
            m.insert(k.into(), J::from(v));
        }
    }
    if let Some(st) = s.stream {
        m.insert("stream".into(), J::from(st));
    }
    let pool = |m: &mut Map<String, J>| {
        if let Some(p) = &s.pool_id {
            m.insert("segment_pool_id".into(), p.to_json());
        }
    };
    if s.npu_key_order {
        pool(&mut m);
    }
    if let Some(t) = &s.segment_type {
        m.insert("segment_type".into(), J::String(t.clone()));
    }
    if !s.npu_key_order {
        pool(&mut m);
    }
    if let Some(e) = s.is_expandable {
        m.insert("is_expandable".into(), J::Bool(e));
    }
    opt_stack(&mut m, snap, s.stack);
    m.insert(
        "blocks".into(),
        J::Array(s.blocks.iter().map(|b| block_json(snap, b)).collect()),
    );
    put_extra(&mut m, &s.extra);
    J::Object(m)
}

fn event_json(snap: &Snapshot, t: &Trace, i: usize) -> J {
    let meta: &EventMeta = snap.meta(t.meta[i]);
    let mut m = Map::new();
    m.insert(
        "action".into(),
        J::String(snap.actions.name(t.action[i]).into()),
    );
    let addr = J::from(t.addr[i]);
    if meta.has(flags::ADDR) {
        m.insert("addr".into(), addr);
    } else if meta.has(flags::DEVICE_FREE) {
        m.insert("device_free".into(), addr);
    }
    if meta.has(flags::SIZE) {
        m.insert("size".into(), J::from(t.size[i]));
    }
    if meta.has(flags::STREAM) {
        let stream = if meta.has(flags::STREAM_UNSIGNED) {
            J::from(meta.stream as u64)
        } else {
            J::from(meta.stream)
        };
        m.insert("stream".into(), stream);
    }
    let time = meta.has(flags::TIME).then(|| J::from(t.time_us[i]));
    if !meta.has(flags::TIME_LATE)
        && let Some(tv) = time.clone()
    {
        m.insert("time_us".into(), tv);
    }
    if let Some(c) = &meta.compile_context {
        m.insert("compile_context".into(), J::String(c.clone()));
    }
    if let Some(u) = &meta.user_metadata {
        m.insert("user_metadata".into(), J::String(u.clone()));
    }
    if meta.has(flags::TIME_LATE)
        && let Some(tv) = time
    {
        m.insert("time_us".into(), tv);
    }
    if let Some(p) = &meta.pool_id {
        m.insert("pool_id".into(), p.to_json());
    }
    if meta.has(flags::FRAMES) {
        m.insert("frames".into(), stack_json(snap, t.stack[i]));
    }
    put_extra(&mut m, &meta.extra);
    J::Object(m)
}

fn traces_json(snap: &Snapshot, traces: &[Trace]) -> J {
    J::Array(
        traces
            .iter()
            .map(|t| J::Array((0..t.len()).map(|i| event_json(snap, t, i)).collect()))
            .collect(),
    )
}

fn annotation_json(a: &Annotation) -> J {
    let mut m = Map::new();
    if let Some(s) = &a.stage {
        m.insert("stage".into(), J::String(s.clone()));
    }
    if let Some(n) = &a.name {
        m.insert("name".into(), J::String(n.clone()));
    }
    if let Some(d) = a.device {
        m.insert("device".into(), J::from(d));
    }
    if let Some(t) = a.time_us {
        m.insert("time_us".into(), J::from(t));
    }
    put_extra(&mut m, &a.extra);
    J::Object(m)
}

/// The snapshot as the JSON value of the dict (or list) PyTorch wrote.
pub fn to_snapshot_json(snap: &Snapshot) -> J {
    let segments = J::Array(
        snap.segments
            .iter()
            .map(|s| segment_json(snap, s))
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
            "device_traces" => snap.device_traces.as_ref().map(|t| traces_json(snap, t)),
            "host_traces" => snap.host_traces.as_ref().map(|t| traces_json(snap, t)),
            "allocator_settings" => snap.allocator_settings.as_ref().map(Value::to_json),
            "host_segments" => snap.host_segments.as_ref().map(Value::to_json),
            "external_annotations" => snap
                .external_annotations
                .as_ref()
                .map(|a| J::Array(a.iter().map(annotation_json).collect())),
            other => snap
                .extra
                .iter()
                .find(|(k, _)| k == other)
                .map(|(_, v)| v.to_json()),
        };
        if let Some(v) = v {
            m.insert(key.clone(), v);
        }
    }
    J::Object(m)
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
