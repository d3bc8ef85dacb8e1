//! `slice`: a range of a trace as a snapshot of its own, for memory_viz and PyTorch's own
//! tools (and leakscope): the allocator state at the range's end as `segments`, the
//! range's events as `device_traces`, the `external_annotations` inside its time range.
//!
//! The range's ends are resolved on one device, the reference (`--device N`, else the
//! device with the most events): its events of indices in `(from, to]` are kept. Other
//! devices, without `--device`, keep their events whose `time_us` lies in the same time
//! range (`(time of from, time of to]`, open at `start` and `end`) and their state after
//! the last of those; a file without `time_us` cannot place them and is refused unless
//! `--device` names one device. With `--device N`, only device N's segments and events
//! are written (the other devices' trace lists stay, empty). `host_segments` and
//! `host_traces` are left out.
//!
//! A device whose range ends at its last event keeps its final `segments` exactly as the
//! file has them; any other state is [`AllocatorState::after`] written back as segments
//! and blocks (free blocks with `requested_size` 0, a block's frames those of its
//! allocation, a segment's those of the file's segment at its address or of its
//! `segment_alloc`/`segment_map`).

use rayon::prelude::*;

use super::{DeviceSelection, Session, SessionError};
use crate::analysis::range::{self, Bound, Edge, RangeError};
use crate::model::fxhash::FastMap;
use crate::model::size::sum_sizes;
use crate::model::{
    Action, Annotation, Block, BlockState, DeviceView, Layout, Segment, Snapshot, StackId, Trace,
    Value, flags,
};
use crate::replay::{self, AllocatorState, Replay};
use crate::report::{SliceReport, SlicedDevice};

/// What to slice.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SliceOptions {
    /// The range starts after this point (its events come after it).
    pub from: Bound,
    /// The range ends after this point (its last event).
    pub to: Bound,
    /// The reference device (`All`: the one with the most events, every device written).
    pub device: DeviceSelection,
}

impl Default for SliceOptions {
    fn default() -> SliceOptions {
        SliceOptions {
            from: Bound::START,
            to: Bound::END,
            device: DeviceSelection::All,
        }
    }
}

impl SliceOptions {
    /// The range `(from, to]` of `device`'s trace.
    pub fn new(from: Bound, to: Bound, device: DeviceSelection) -> SliceOptions {
        SliceOptions { from, to, device }
    }
}

/// A slice: the snapshot to write and what it holds.
pub struct Slice {
    /// The sliced snapshot (its tables are the input's, its content the range's).
    pub snapshot: Snapshot,
    /// What it holds.
    pub report: SliceReport,
}

/// Events `[start, end)` of a device.
type Span = (usize, usize);

impl Session {
    /// `slice`: the range `(opts.from, opts.to]` as a snapshot of its own.
    pub fn slice(&self, opts: &SliceOptions) -> Result<Slice, SessionError> {
        let fail = |reason| SessionError::Slice {
            file: self.name.clone(),
            reason,
        };
        let snap = &self.snap;
        let views = snap.devices();
        let reference = match opts.device {
            DeviceSelection::Only(d) => {
                self.select(opts.device)?;
                d
            }
            DeviceSelection::All => views
                .iter()
                .max_by_key(|v| (v.trace.len(), std::cmp::Reverse(v.device)))
                .map_or(0, |v| v.device),
        };
        let Some(ref_view) = views.iter().find(|v| v.device == reference) else {
            return Err(fail(RangeError::NoEvents { device: reference }));
        };
        if ref_view.trace.is_empty() {
            return Err(fail(RangeError::NoEvents { device: reference }));
        }
        let ref_replay = replay::replay(ref_view);
        let cut = |end: &'static str, bound: Bound| {
            range::resolve(snap, &ref_replay, bound)
                .map_err(|source| fail(RangeError::Point { end, bound, source }))
        };
        let (from, to) = (cut("from", opts.from)?, cut("to", opts.to)?);
        let last = match to.after {
            Some(t) if from.after.is_none_or(|f| f < t) => t,
            _ => {
                return Err(fail(RangeError::Empty {
                    from: opts.from,
                    to: opts.to,
                    from_event: from.after,
                    to_event: to.after,
                }));
            }
        };
        let ref_span = (from.after.map_or(0, |f| f as usize + 1), last as usize + 1);
        let written: Vec<&DeviceView> = views
            .iter()
            .filter(|v| match opts.device {
                DeviceSelection::All => !v.segments.is_empty() || !v.trace.is_empty(),
                DeviceSelection::Only(d) => v.device == d,
            })
            .collect();
        let parts = written
            .par_iter()
            .map(|v| {
                let span = if v.device == reference {
                    ref_span
                } else {
                    time_span(snap, v, from.time, to.time)?
                };
                let own;
                let replay = if v.device == reference {
                    &ref_replay
                } else {
                    own = replay::replay(v);
                    &own
                };
                Ok(slice_device(snap, v, replay, span))
            })
            .collect::<Result<Vec<_>, RangeError>>()
            .map_err(fail)?;
        let n_traces = snap.device_traces.as_ref().map_or(0, Vec::len);
        let mut traces = vec![Trace::default(); n_traces];
        let mut segments = Vec::new();
        let mut devices = Vec::new();
        for (d, segs, trace) in parts {
            if let Some(slot) = usize::try_from(d.device)
                .ok()
                .and_then(|i| traces.get_mut(i))
            {
                *slot = trace;
            }
            segments.extend(segs);
            devices.push(d);
        }
        let kept: Vec<i64> = devices.iter().map(|d| d.device).collect();
        let annotations = snap.external_annotations.as_ref().map(|all| {
            all.iter()
                .filter(|a| a.device.is_none_or(|d| kept.contains(&d)))
                .filter(|a| in_time(a, from.time, to.time))
                .cloned()
                .collect::<Vec<Annotation>>()
        });
        let report = SliceReport {
            schema: crate::report::schema::SLICE,
            file: self.name.clone(),
            reference_device: reference,
            from: opts.from.to_string(),
            to: opts.to.to_string(),
            from_event: from.after,
            to_event: last,
            time_from: from.time,
            time_to: to.time,
            devices,
            annotations: annotations.as_ref().map_or(0, Vec::len),
        };
        let mut top_keys: Vec<String> = snap
            .top_keys
            .iter()
            .filter(|k| !matches!(k.as_str(), "host_segments" | "host_traces"))
            .cloned()
            .collect();
        for key in ["device_traces", "segments"] {
            if !top_keys.iter().any(|k| k == key) {
                top_keys.insert(0, key.to_string());
            }
        }
        let snapshot = Snapshot {
            format: snap.format.clone(),
            layout: Layout::Dict,
            top_keys,
            strings: snap.strings.clone(),
            frames: snap.frames.clone(),
            stacks: snap.stacks.clone(),
            actions: snap.actions.clone(),
            metas: snap.metas.clone(),
            segments,
            device_traces: Some(traces),
            allocator_settings: snap.allocator_settings.clone(),
            external_annotations: annotations,
            extra: snap.extra.clone(),
            ..Snapshot::default()
        };
        Ok(Slice { snapshot, report })
    }
}

/// An annotation inside `(lo, hi]`; none when an end has no time, all when both are open.
fn in_time(a: &Annotation, lo: Edge, hi: Edge) -> bool {
    match (lo, hi, a.time_us) {
        (Edge::Open, Edge::Open, _) => true,
        (Edge::Untimed, _, _) | (_, Edge::Untimed, _) | (_, _, None) => false,
        (lo, hi, Some(t)) => {
            let above = match lo {
                Edge::At(l) => t > l,
                _ => true,
            };
            let below = match hi {
                Edge::At(h) => t <= h,
                _ => true,
            };
            above && below
        }
    }
}

/// The events of another device inside `(lo, hi]` (traces are in time order).
fn time_span(snap: &Snapshot, v: &DeviceView, lo: Edge, hi: Edge) -> Result<Span, RangeError> {
    let t = v.trace;
    if t.is_empty() || (lo == Edge::Open && hi == Edge::Open) {
        return Ok((0, t.len()));
    }
    let untimed = || RangeError::Untimed { device: v.device };
    if lo == Edge::Untimed
        || hi == Edge::Untimed
        || t.meta.iter().any(|&m| !snap.meta(m).has(flags::TIME))
    {
        return Err(untimed());
    }
    let start = match lo {
        Edge::At(l) => t.time_us.partition_point(|&x| x <= l),
        _ => 0,
    };
    let end = match hi {
        Edge::At(h) => t.time_us.partition_point(|&x| x <= h),
        _ => t.len(),
    };
    Ok((start, end.max(start)))
}

/// One device's part of the slice: what it holds, its segments at the span's end and the
/// span's events.
fn slice_device(
    snap: &Snapshot,
    v: &DeviceView,
    replay: &Replay,
    (start, end): Span,
) -> (SlicedDevice, Vec<Segment>, Trace) {
    let t = v.trace;
    let trace = Trace {
        action: t.action[start..end].to_vec(),
        addr: t.addr[start..end].to_vec(),
        size: t.size[start..end].to_vec(),
        time_us: t.time_us[start..end].to_vec(),
        stack: t.stack[start..end].to_vec(),
        meta: t.meta[start..end].to_vec(),
        ..Trace::default()
    };
    let final_state = end == t.len();
    let (segments, unresolved) = if final_state {
        (v.segments.iter().map(|&s| s.clone()).collect(), 0)
    } else {
        let k = end.checked_sub(1).map(|k| k as u32);
        let state = AllocatorState::after(v, replay, k);
        (
            written_segments(snap, v, replay, k, &state),
            state.unresolved,
        )
    };
    let active = |b: &&Block| b.state.is_active();
    let device = SlicedDevice {
        device: v.device,
        first_event: (end > start).then_some(start as u32),
        events: end - start,
        segments: segments.len(),
        reserved_bytes: sum_sizes(segments.iter().map(|s| s.total_size)),
        requested_bytes: sum_sizes(
            segments
                .iter()
                .flat_map(|s| s.blocks.iter().filter(active))
                .map(Block::requested_bytes),
        ),
        final_state,
        unresolved,
    };
    (device, segments, trace)
}

/// `state` (after event `k`) as the segments `_dump_snapshot` writes, shaped like the
/// file's own (the keys its first segment has).
fn written_segments(
    snap: &Snapshot,
    v: &DeviceView,
    replay: &Replay,
    k: Option<u32>,
    state: &AllocatorState,
) -> Vec<Segment> {
    let template = snap.segments.first();
    let in_file: FastMap<u64, &Segment> = v.segments.iter().map(|s| (s.address, *s)).collect();
    let t = v.trace;
    let upto = k.map_or(0, |k| k as usize + 1);
    let mut made: FastMap<u64, StackId> = FastMap::default();
    for i in 0..upto {
        if matches!(t.action[i], Action::SEGMENT_ALLOC | Action::SEGMENT_MAP)
            && snap.meta(t.meta[i]).has(flags::FRAMES)
        {
            made.insert(t.addr[i], t.stack[i]);
        }
    }
    let block_stacks: FastMap<u64, StackId> =
        replay.live_set(k).map(|l| (l.addr, l.stack)).collect();
    let with_stacks = template.is_none_or(|s| s.stack.is_some());
    state
        .segments
        .iter()
        .map(|s| {
            let own = in_file.get(&s.address).copied();
            let sum = |keep: fn(&crate::replay::StateBlock) -> bool,
                       f: fn(&crate::replay::StateBlock) -> u64| {
                sum_sizes(s.blocks.iter().filter(|b| keep(b)).map(f))
            };
            let blocks = s
                .blocks
                .iter()
                .map(|b| Block {
                    address: b.address,
                    address_in_file: true,
                    size: b.size,
                    requested_size: Some(if b.active { b.requested } else { 0 }),
                    state: if !b.active {
                        BlockState::Inactive
                    } else if b.pending_free {
                        BlockState::ActivePendingFree
                    } else {
                        BlockState::ActiveAllocated
                    },
                    stack: Some(if b.active {
                        block_stacks
                            .get(&b.address)
                            .copied()
                            .unwrap_or(StackId::EMPTY)
                    } else {
                        StackId::EMPTY
                    }),
                    history: None,
                    extra: Vec::new(),
                })
                .collect();
            Segment {
                device: Some(v.device),
                address: s.address,
                total_size: s.total_size,
                allocated_size: Some(sum(|b| b.allocated(), |b| b.size)),
                active_size: Some(sum(|b| b.active, |b| b.size)),
                requested_size: Some(sum(|b| b.allocated(), |b| b.requested)),
                stream: Some(s.stream),
                segment_type: Some(s.pool.clone()),
                pool_id: own.and_then(|o| o.pool_id.clone()).or_else(|| {
                    template
                        .and_then(|t| t.pool_id.as_ref())
                        .map(|_| Value::Tuple(vec![Value::Int(0), Value::Int(0)]))
                }),
                is_expandable: match template {
                    Some(t) => t.is_expandable.map(|_| s.expandable),
                    None => Some(s.expandable),
                },
                stack: with_stacks.then(|| {
                    own.and_then(|o| o.stack)
                        .or_else(|| made.get(&s.address).copied())
                        .unwrap_or(StackId::EMPTY)
                }),
                blocks,
                npu_key_order: template.is_some_and(|t| t.npu_key_order),
                extra: own.map(|o| o.extra.clone()).unwrap_or_default(),
            }
        })
        .collect()
}
