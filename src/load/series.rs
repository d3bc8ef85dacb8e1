//! A series of snapshots as one trace: each file is the allocator's state at the end of a
//! unit of work (a step), and what changed between two consecutive files becomes the
//! events of one window.
//!
//! A state-only snapshot (`_record_memory_history(enabled="state")`) costs a fraction of a
//! millisecond to take where a traced one costs most of a second, so production runs dump
//! one per step. Growth across them is read the way growth across a trace's windows is:
//! the leak finder needs, per window, which blocks were born there and whether they were
//! still alive one window later, and consecutive states say exactly that.
//!
//! Blocks are matched across files by address, size and allocation stack: a block alive
//! in two consecutive files is one allocation, counted once. One that is gone is freed in
//! the window that ends at the file where it is missing; one that is new is born in the
//! window that ends where it first appears. Within a window the frees come first (a new
//! block may take a freed one's address), then segment changes, then the births. The
//! first file's blocks are born before the first window, as a trace's early allocations
//! are. The stitched trace of a change has no times and no free stacks (the
//! states say neither).
//!
//! Files with traces contribute them where they overlap: when a file's trace reaches back
//! past the previous file's dump (its first event is no later than the previous file's
//! last) and its events since then turn the previous state into this file's, those
//! events are the window, with their times, frees and free stacks, and the allocations
//! made and freed between the two dumps.
//!
//! Memory: one file's blocks at a time besides the stitched trace, whose events are the
//! changes between files (a few per kept block).

use std::collections::BTreeMap;

use crate::model::fxhash::FastMap;
use crate::model::{
    Action, EventMeta, Frame, FrameId, Layout, MetaId, Segment, Snapshot, StackId, Trace, flags,
};

/// A block as the stitcher matches it, with what its events carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Live {
    addr: u64,
    size: u64,
    stack: StackId,
    requested: u64,
    stream: i64,
}

impl Live {
    fn key(&self) -> (u64, u64, StackId) {
        (self.addr, self.size, self.stack)
    }
}

/// A segment as the stitcher matches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Reserved {
    addr: u64,
    size: u64,
    stream: i64,
    stack: StackId,
}

/// One device's last state and stitched trace.
#[derive(Default)]
struct DeviceSeries {
    blocks: Vec<Live>,
    segments: Vec<Reserved>,
    trace: Trace,
    /// Event index where the change up to each file after the first begins.
    starts: Vec<u32>,
    /// The time of the last file's last trace event on this device (when it had one):
    /// when that file was dumped, as near as the file says.
    dumped_at: Option<i64>,
}

/// The series once every file is in: one snapshot whose trace per device is the changes
/// between files, whose final state is the last file's.
#[derive(Debug)]
pub struct Series {
    /// The stitched snapshot.
    pub snapshot: Snapshot,
    /// The files, in order, as named by the caller.
    pub files: Vec<String>,
    /// Per device: the event index where the change up to file `k + 1` begins (one entry
    /// per file after the first); window `k` runs from there to the next entry.
    pub starts: BTreeMap<i64, Vec<u32>>,
    /// Trace events the files held.
    pub traced_events: u64,
    /// Windows (of any device) whose events are a file's own trace, not the change of
    /// states: that file's trace reached back past the previous file's dump.
    pub traced_windows: u64,
}

/// Builds a [`Series`] from snapshots given in order, one at a time.
///
/// ```
/// use leakscope::load::series::Stitcher;
/// let mut s = Stitcher::default();
/// s.push("a.pickle".into(), leakscope::model::Snapshot::default());
/// s.push("b.pickle".into(), leakscope::model::Snapshot::default());
/// let series = s.finish();
/// assert_eq!(series.files.len(), 2);
/// ```
#[derive(Default)]
pub struct Stitcher {
    out: Snapshot,
    devices: BTreeMap<i64, DeviceSeries>,
    files: Vec<String>,
    last_segments: Vec<Segment>,
    metas: FastMap<(i64, bool), MetaId>,
    traced_events: u64,
    traced_windows: u64,
}

/// Maps one file's ids into the stitched snapshot's tables.
struct Remap<'a> {
    src: &'a Snapshot,
    frames: Vec<Option<FrameId>>,
    stacks: Vec<Option<StackId>>,
    metas: Vec<Option<MetaId>>,
}

impl Remap<'_> {
    fn stack(&mut self, out: &mut Snapshot, id: StackId) -> StackId {
        if let Some(Some(s)) = self.stacks.get(id.index()) {
            return *s;
        }
        let mut ids = Vec::with_capacity(self.src.stacks.get(id).len());
        for &f in self.src.stacks.get(id) {
            let mapped = match self.frames[f.index()] {
                Some(m) => m,
                None => {
                    let fr = self.src.frames.get(f);
                    let frame = Frame {
                        name: out.strings.intern(self.src.strings.get(fr.name)),
                        filename: out.strings.intern(self.src.strings.get(fr.filename)),
                        line: fr.line,
                        extra: fr.extra.clone(),
                    };
                    let m = out.frames.intern(frame);
                    self.frames[f.index()] = Some(m);
                    m
                }
            };
            ids.push(mapped);
        }
        let s = out.stacks.intern(&ids);
        self.stacks[id.index()] = Some(s);
        s
    }

    fn opt(&mut self, out: &mut Snapshot, id: Option<StackId>) -> StackId {
        id.map_or(StackId::EMPTY, |s| self.stack(out, s))
    }

    fn meta(&mut self, out: &mut Snapshot, id: MetaId) -> MetaId {
        if let Some(Some(m)) = self.metas.get(id.index()) {
            return *m;
        }
        out.metas.push(self.src.meta(id).clone());
        let m = MetaId((out.metas.len() - 1) as u32);
        if let Some(slot) = self.metas.get_mut(id.index()) {
            *slot = Some(m);
        }
        m
    }
}

impl Stitcher {
    fn meta(&mut self, stream: i64, with_frames: bool) -> MetaId {
        let metas = &mut self.out.metas;
        *self.metas.entry((stream, with_frames)).or_insert_with(|| {
            let mut f = flags::ADDR | flags::SIZE | flags::STREAM;
            if with_frames {
                f |= flags::FRAMES;
            }
            metas.push(EventMeta {
                flags: f,
                stream,
                compile_context: None,
                user_metadata: None,
                pool_id: None,
                extra: Vec::new(),
            });
            MetaId((metas.len() - 1) as u32)
        })
    }

    /// Adds the next file of the series.
    pub fn push(&mut self, name: String, snap: Snapshot) {
        let first = self.files.is_empty();
        self.files.push(name.clone());
        self.traced_events += snap.all_traces().map(|t| t.len() as u64).sum::<u64>();
        for w in &snap.warnings {
            self.out.warnings.push(format!("{name}: {w}"));
        }
        self.out.events_without_address += snap.events_without_address;
        let mut remap = Remap {
            src: &snap,
            frames: vec![None; snap.frames.len()],
            stacks: vec![None; snap.stacks.len()],
            metas: vec![None; snap.metas.len()],
        };
        // This file's state per device, in address order.
        let mut now: BTreeMap<i64, (Vec<Live>, Vec<Reserved>)> = BTreeMap::new();
        for seg in &snap.segments {
            let stream = seg.stream.unwrap_or(0);
            let entry = now.entry(seg.device_index()).or_default();
            entry.1.push(Reserved {
                addr: seg.address,
                size: seg.total_size,
                stream,
                stack: remap.opt(&mut self.out, seg.stack),
            });
            for b in seg.blocks.iter().filter(|b| b.state.is_active()) {
                let stack = remap.opt(&mut self.out, b.stack);
                entry.0.push(Live {
                    addr: b.address,
                    size: b.size,
                    stack,
                    requested: b.requested_bytes(),
                    stream,
                });
            }
        }
        for d in snap.device_indices() {
            now.entry(d).or_default();
        }
        for (d, _) in self.devices.iter() {
            now.entry(*d).or_default();
        }
        for (d, (mut blocks, mut segments)) in now {
            blocks.sort_unstable();
            segments.sort_unstable();
            let mut dev = self.devices.remove(&d).unwrap_or_else(|| DeviceSeries {
                // A device first seen in a later file had no events before it.
                starts: vec![0; self.files.len().saturating_sub(2)],
                ..DeviceSeries::default()
            });
            if !first {
                dev.starts.push(dev.trace.len() as u32);
            }
            let traced = !first && self.own_trace(&mut dev, &mut remap, d, &blocks);
            if traced {
                self.traced_windows += 1;
                dev.blocks = blocks;
                dev.segments = segments;
            } else {
                self.changes(&mut dev, blocks, segments);
            }
            dev.dumped_at = last_time(&snap, d);
            self.devices.insert(d, dev);
        }
        // The last file's state is the stitched snapshot's final state.
        let mut segments = snap.segments.clone();
        for seg in &mut segments {
            seg.stack = seg.stack.map(|s| remap.stack(&mut self.out, s));
            for b in &mut seg.blocks {
                b.stack = b.stack.map(|s| remap.stack(&mut self.out, s));
                for h in b.history.iter_mut().flatten() {
                    h.stack = h.stack.map(|s| remap.stack(&mut self.out, s));
                }
            }
        }
        self.last_segments = segments;
        self.out.format = snap.format.clone();
        self.out.allocator_settings = snap.allocator_settings.clone();
    }

    /// When this file's trace on device `d` reaches back past the previous file's dump
    /// and its events since then turn the previous state into this one (`now`, matched
    /// by address and requested bytes), appends those events (their stacks, frees and
    /// times with them) and says so; otherwise appends nothing.
    fn own_trace(
        &mut self,
        dev: &mut DeviceSeries,
        remap: &mut Remap,
        d: i64,
        now: &[Live],
    ) -> bool {
        let Some(since) = dev.dumped_at else {
            return false;
        };
        let snap = remap.src;
        let t = snap.trace(d);
        let timed = |i: usize| snap.meta(t.meta[i]).has(flags::TIME);
        if t.is_empty() || !(0..t.len()).all(timed) || t.time_us[0] > since {
            return false;
        }
        let from = t.time_us.partition_point(|&x| x <= since);
        // The events since the dump must turn the last state into this one.
        let mut alive: FastMap<u64, u64> =
            dev.blocks.iter().map(|b| (b.addr, b.requested)).collect();
        for i in from..t.len() {
            let a = t.action[i];
            if a == Action::ALLOC {
                alive.insert(t.addr[i], t.size[i]);
            } else if a == Action::FREE_COMPLETED || a == Action::FREE {
                alive.remove(&t.addr[i]);
            }
        }
        let matches = alive.len() == now.len()
            && now.iter().all(|b| alive.get(&b.addr) == Some(&b.requested));
        if !matches {
            return false;
        }
        for i in from..t.len() {
            let action = self
                .out
                .actions
                .code(snap.actions.name(t.action[i]))
                .unwrap_or(t.action[i]);
            let stack = remap.stack(&mut self.out, t.stack[i]);
            let meta = remap.meta(&mut self.out, t.meta[i]);
            dev.trace
                .push(action, t.addr[i], t.size[i], t.time_us[i], stack, meta);
        }
        true
    }

    /// Appends to `dev`'s trace what changed from its last state to `blocks` and
    /// `segments`, and keeps them as its state.
    fn changes(&mut self, dev: &mut DeviceSeries, blocks: Vec<Live>, segments: Vec<Reserved>) {
        let gone: Vec<Live> = missing(&dev.blocks, &blocks, Live::key);
        let born: Vec<Live> = missing(&blocks, &dev.blocks, Live::key);
        let seg_key = |s: &Reserved| (s.addr, s.size);
        let seg_gone = missing(&dev.segments, &segments, seg_key);
        let seg_new = missing(&segments, &dev.segments, seg_key);
        for b in gone {
            let m = self.meta(b.stream, false);
            dev.trace.push(
                Action::FREE_REQUESTED,
                b.addr,
                b.requested,
                0,
                StackId::EMPTY,
                m,
            );
            dev.trace.push(
                Action::FREE_COMPLETED,
                b.addr,
                b.requested,
                0,
                StackId::EMPTY,
                m,
            );
        }
        for s in seg_gone {
            let m = self.meta(s.stream, false);
            dev.trace
                .push(Action::SEGMENT_FREE, s.addr, s.size, 0, StackId::EMPTY, m);
        }
        for s in seg_new {
            let m = self.meta(s.stream, true);
            dev.trace
                .push(Action::SEGMENT_ALLOC, s.addr, s.size, 0, s.stack, m);
        }
        for b in born {
            let m = self.meta(b.stream, true);
            dev.trace
                .push(Action::ALLOC, b.addr, b.requested, 0, b.stack, m);
        }
        dev.blocks = blocks;
        dev.segments = segments;
    }

    /// The stitched series.
    pub fn finish(mut self) -> Series {
        let n = self.devices.keys().max().map_or(0, |&d| d.max(-1) + 1) as usize;
        let mut traces = vec![Trace::default(); n];
        let mut starts = BTreeMap::new();
        for (d, dev) in self.devices {
            if let Ok(i) = usize::try_from(d) {
                traces[i] = dev.trace;
            }
            starts.insert(d, dev.starts);
        }
        self.out.device_traces = Some(traces);
        self.out.segments = self.last_segments;
        self.out.layout = Layout::Dict;
        self.out.top_keys = ["segments", "device_traces", "allocator_settings"]
            .map(String::from)
            .to_vec();
        Series {
            snapshot: self.out,
            files: self.files,
            starts,
            traced_events: self.traced_events,
            traced_windows: self.traced_windows,
        }
    }
}

/// The items of sorted `a` whose key sorted `b` lacks, in order.
fn missing<T: Copy, K: Ord>(a: &[T], b: &[T], key: impl Fn(&T) -> K) -> Vec<T> {
    let mut out = Vec::new();
    let mut j = 0;
    for x in a {
        let k = key(x);
        while j < b.len() && key(&b[j]) < k {
            j += 1;
        }
        if j >= b.len() || key(&b[j]) != k {
            out.push(*x);
        }
    }
    out
}

/// The time of the last event of `snap`'s trace on device `d`, when every event of it is
/// timed.
fn last_time(snap: &Snapshot, d: i64) -> Option<i64> {
    let t = snap.trace(d);
    let all_timed = (0..t.len()).all(|i| snap.meta(t.meta[i]).has(flags::TIME));
    (all_timed && !t.is_empty())
        .then(|| t.time_us.iter().copied().max())
        .flatten()
}
