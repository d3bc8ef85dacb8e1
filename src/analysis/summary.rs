//! `leakscope summary`: what is in the file, per device and in total.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::fxhash::FastMap;
use crate::model::size::add_size;
use crate::model::{
    Action, BlockState, Compression, Container, DeviceView, Layout, PickleStyle, Snapshot, StackId,
    TraceScan, flags,
};
use crate::replay;

/// JSON schema name of [`Summary`].
pub const SCHEMA: &str = "leakscope.summary/2";

/// How the file was written and by whom.
#[derive(Clone, Debug, Serialize)]
pub struct FormatInfo {
    /// `pickle`, `json`, `msgpack` or `object`.
    pub container: Container,
    /// Pickle protocol (null for JSON, or protocols 0/1 which have no PROTO).
    pub pickle_protocol: Option<u8>,
    /// `cpython` or `torch-cpp` (torch's C++ pickler); null when not a pickle.
    pub pickle_style: Option<PickleStyle>,
    /// `none`, `gzip` or `zstd`.
    pub compression: Compression,
    /// `cuda` or `npu` (torch_npu).
    pub producer: String,
    /// `dict` or `segment-list`.
    pub layout: String,
    /// The PyTorch version range the keys point to.
    pub era: String,
}

/// Byte and count totals (for one device or all).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    /// Number of segments.
    pub segments: u64,
    /// Number of blocks.
    pub blocks: u64,
    /// Blocks still held by the program (allocated or pending free).
    pub active_blocks: u64,
    /// Σ segment `total_size`.
    pub reserved_bytes: u64,
    /// Σ block `size` over `active_allocated` blocks (pending frees excluded, as
    /// `torch.cuda.memory_allocated`).
    pub allocated_bytes: u64,
    /// Σ block `requested_size` over active blocks (allocated or pending free, as
    /// torch's `requested_bytes`).
    pub requested_bytes: u64,
    /// Σ block `size` over active blocks (allocated or pending free).
    pub active_bytes: u64,
    /// `active_bytes - requested_bytes`: what rounding to block sizes costs.
    pub rounding_overhead_bytes: u64,
    /// `reserved_bytes - active_bytes`: cached but free.
    pub cached_free_bytes: u64,
    /// Blocks per state string.
    pub blocks_by_state: BTreeMap<String, u64>,
    /// Trace events.
    pub trace_events: u64,
    /// Trace events per action.
    pub actions: BTreeMap<String, u64>,
}

impl Totals {
    /// Adds `o`; returns whether a byte sum stopped at the top (2^64 - 1).
    fn add(&mut self, o: &Totals) -> bool {
        self.segments += o.segments;
        self.blocks += o.blocks;
        self.active_blocks += o.active_blocks;
        let mut full = false;
        for (sum, v) in [
            (&mut self.reserved_bytes, o.reserved_bytes),
            (&mut self.allocated_bytes, o.allocated_bytes),
            (&mut self.requested_bytes, o.requested_bytes),
            (&mut self.active_bytes, o.active_bytes),
            (&mut self.rounding_overhead_bytes, o.rounding_overhead_bytes),
            (&mut self.cached_free_bytes, o.cached_free_bytes),
        ] {
            full |= add_size(sum, v);
        }
        self.trace_events += o.trace_events;
        for (k, v) in &o.blocks_by_state {
            *self.blocks_by_state.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.actions {
            *self.actions.entry(k.clone()).or_default() += v;
        }
        full
    }
}

/// What in a device's final segments no allocator can hold, counted for a warning.
#[derive(Default)]
struct Impossible {
    /// Byte sums that passed 2^64 - 1 (shown as that).
    sums: u64,
    /// Blocks larger than their segment.
    blocks: u64,
}

/// One device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceSummary {
    /// Device index.
    pub device: i64,
    /// Totals of this device.
    #[serde(flatten)]
    pub totals: Totals,
    /// Earliest `time_us` in the trace.
    pub first_time_us: Option<i64>,
    /// Latest `time_us` in the trace.
    pub last_time_us: Option<i64>,
    /// Frees whose allocation the trace does not hold.
    pub unmatched_frees: u64,
    /// Segment frees/unmaps with no earlier segment alloc/map.
    pub unmatched_segment_frees: u64,
    /// Active blocks allocated before the trace began.
    pub pre_trace_blocks: u64,
    /// Allocations the replay leaves live that the final segments do not hold as such
    /// (none unless the trace wrapped or lost events).
    pub replay_mismatches: u64,
    /// `alloc` events at an address already live (the trace lost a free).
    pub double_allocs: u64,
    /// Events whose `time_us` is earlier than the previous timed event's.
    pub time_reversals: u64,
    /// Whether this device's trace misses part of the history.
    pub wrapped: bool,
    /// Its memory pools at the end, by pool id: the default pool and each private one.
    pub pools: Vec<super::pools::PoolRow>,
}

/// Trace coverage over all devices.
#[derive(Clone, Debug, Serialize)]
pub struct TraceInfo {
    /// The trace does not hold the whole history: the ring buffer wrapped or recording
    /// started late (frees with no alloc, or live blocks with no alloc), or the file says
    /// the buffer overflowed.
    pub wrapped: bool,
    /// `trace_alloc_overflowed` when the file has it (2026).
    pub overflowed: Option<bool>,
    /// Σ unmatched frees.
    pub unmatched_frees: u64,
    /// Σ unmatched segment frees.
    pub unmatched_segment_frees: u64,
    /// Σ pre-trace blocks.
    pub pre_trace_blocks: u64,
    /// Σ replay mismatches.
    pub replay_mismatches: u64,
    /// Σ allocs at an address already live.
    pub double_allocs: u64,
    /// Σ events whose `time_us` goes backwards.
    pub time_reversals: u64,
    /// Alloc/free entries without an address, left out of the traces by the loader.
    pub events_without_address: u64,
    /// Earliest `time_us`.
    pub first_time_us: Option<i64>,
    /// Latest `time_us`.
    pub last_time_us: Option<i64>,
    /// Whether events carry `time_us` (≥ 2.2, not torch_npu).
    pub has_time_us: bool,
}

/// Frame interning figures.
#[derive(Clone, Debug, Serialize)]
pub struct FrameInfo {
    /// Distinct frames.
    pub unique_frames: u64,
    /// Distinct non-empty stacks.
    pub unique_stacks: u64,
}

/// The `summary` report (`leakscope.summary/2`).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Schema name and version.
    pub schema: &'static str,
    /// The file summarized.
    pub file: String,
    /// Encoding.
    pub format: FormatInfo,
    /// All devices together.
    pub totals: TotalsWithDevices,
    /// Per device, by index.
    pub devices: Vec<DeviceSummary>,
    /// Trace coverage.
    pub trace: TraceInfo,
    /// Frames.
    pub frames: FrameInfo,
    /// Number of `external_annotations` entries.
    pub annotations: u64,
    /// Distinct annotation names with their START counts, most frequent first (at most 20).
    pub annotation_names: Vec<(String, u64)>,
    /// Top-level keys in file order.
    pub top_keys: Vec<String>,
    /// What the loader skipped or could not interpret.
    pub warnings: Vec<String>,
}

/// Totals plus the device count.
#[derive(Clone, Debug, Serialize)]
pub struct TotalsWithDevices {
    /// Number of devices.
    pub devices: u64,
    /// The sums.
    #[serde(flatten)]
    pub totals: Totals,
}

fn device_totals(
    dev: &DeviceView,
    snap: &Snapshot,
    scan: &TraceScan,
    odd: &mut Impossible,
) -> Totals {
    let mut t = Totals {
        segments: dev.segments.len() as u64,
        ..Default::default()
    };
    let add = |odd: &mut Impossible, sum: &mut u64, v: u64| odd.sums += u64::from(add_size(sum, v));
    for s in &dev.segments {
        add(odd, &mut t.reserved_bytes, s.total_size);
        for b in &s.blocks {
            t.blocks += 1;
            odd.blocks += u64::from(b.size > s.total_size);
            *t.blocks_by_state
                .entry(b.state.as_str().to_string())
                .or_default() += 1;
            if b.state.is_active() {
                t.active_blocks += 1;
                add(odd, &mut t.active_bytes, b.size);
                add(
                    odd,
                    &mut t.requested_bytes,
                    b.requested_size.unwrap_or(b.size),
                );
            }
            if b.state == BlockState::ActiveAllocated {
                add(odd, &mut t.allocated_bytes, b.size);
            }
        }
    }
    t.rounding_overhead_bytes = t.active_bytes.saturating_sub(t.requested_bytes);
    t.cached_free_bytes = t.reserved_bytes.saturating_sub(t.active_bytes);
    t.trace_events = dev.trace.len() as u64;
    for (code, &n) in scan.actions.iter().enumerate() {
        if n > 0 {
            t.actions
                .insert(snap.actions.name(Action(code as u8)).to_string(), n);
        }
    }
    t
}

/// Guesses the producer: torch_npu orders `segment_pool_id` before `segment_type` and
/// is the only one with `workspace_snapshot` entries.
pub fn producer(snap: &Snapshot) -> &'static str {
    producer_with(snap, &|a| snap.all_traces().any(|t| t.has_action(a)))
}

/// [`producer`], told by `any_action` whether some event has an action.
fn producer_with(snap: &Snapshot, any_action: &dyn Fn(Action) -> bool) -> &'static str {
    let npu_action = any_action(Action::WORKSPACE_SNAPSHOT);
    if npu_action || snap.segments.iter().any(|s| s.npu_key_order) {
        "npu"
    } else {
        "cuda"
    }
}

/// Guesses the PyTorch version range from the keys present.
pub fn era(snap: &Snapshot) -> String {
    era_with(snap, &|a| snap.all_traces().any(|t| t.has_action(a)))
}

/// [`era`], told by `any_action` whether some event has an action.
fn era_with(snap: &Snapshot, any_action: &dyn Fn(Action) -> bool) -> String {
    if snap.layout == Layout::SegmentList {
        return "torch.cuda.memory_snapshot() segment list (any version)".into();
    }
    let any_meta = |f: &dyn Fn(&crate::model::EventMeta) -> bool| snap.metas.iter().any(f);
    if producer_with(snap, any_action) == "npu" {
        return if snap.segments.iter().any(|s| s.pool_id.is_some()) {
            "torch_npu (2.3 or later layout)".into()
        } else {
            "torch_npu".into()
        };
    }
    if snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .any(|b| b.history.is_some())
    {
        return "torch 2.0 (block history)".into();
    }
    if snap.host_traces.is_some()
        || snap.host_segments.is_some()
        || any_meta(&|m| m.pool_id.is_some())
        || any_action(Action::ANNOTATE)
    {
        return "torch 2.11 or main (2026)".into();
    }
    if any_meta(&|m| m.user_metadata.is_some()) {
        return "torch 2.10 or later".into();
    }
    let graph_key = snap
        .allocator_settings
        .as_ref()
        .and_then(|s| s.get("graph_capture_record_stream_reuse"))
        .is_some();
    if any_meta(&|m| m.compile_context.is_some()) || graph_key {
        return "torch 2.8 to 2.9".into();
    }
    if snap.external_annotations.is_some() || snap.allocator_settings.is_some() {
        return "torch 2.3 to 2.7".into();
    }
    if any_meta(&|m| m.has(flags::TIME)) {
        return "torch 2.2".into();
    }
    if snap.all_traces().any(|t| !t.is_empty()) {
        return "torch 2.1".into();
    }
    "torch 2.1 or later (no trace to date it)".into()
}

fn overflowed(snap: &Snapshot) -> Option<bool> {
    let key = "trace_alloc_overflowed";
    snap.extra
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.as_bool())
        .or_else(|| {
            snap.allocator_settings
                .as_ref()
                .and_then(|s| s.get(key))
                .and_then(|v| v.as_bool())
        })
}

/// Computes the summary of `snap`, read from `file`.
pub fn summarize(snap: &Snapshot, file: &str) -> Summary {
    let one = |dev: &DeviceView| {
        let scan = dev.trace.scan(&snap.metas);
        let mut odd = Impossible::default();
        let t = device_totals(dev, snap, scan, &mut odd);
        let cov = replay::coverage_of(dev, scan);
        let (first, last, time_reversals) =
            (scan.first_time_us, scan.last_time_us, scan.time_reversals);
        let wrapped =
            !dev.trace.is_empty() && (cov.unmatched_frees > 0 || cov.pre_trace_blocks > 0);
        let summary = DeviceSummary {
            device: dev.device,
            totals: t,
            first_time_us: first,
            last_time_us: last,
            unmatched_frees: cov.unmatched_frees,
            unmatched_segment_frees: cov.unmatched_segment_frees,
            pre_trace_blocks: cov.pre_trace_blocks,
            replay_mismatches: cov.mismatches,
            double_allocs: cov.double_allocs,
            time_reversals,
            wrapped,
            pools: super::pools::at_end(snap, dev),
        };
        (summary, odd)
    };
    // Devices are independent: the ones with long traces are summarized in parallel.
    let views = snap.devices();
    let anns = snap.external_annotations.as_deref().unwrap_or(&[]);
    let (devices, annotation_names) = std::thread::scope(|scope| {
        // Annotation names are counted meanwhile, when there are many.
        let names = (anns.len() > 10_000).then(|| scope.spawn(|| annotation_names(anns)));
        let devices: Vec<(DeviceSummary, Impossible)> = views
            .iter()
            .map(|dev| {
                if dev.trace.len() > 100_000 {
                    Err(scope.spawn(|| one(dev)))
                } else {
                    Ok(one(dev))
                }
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|p| p.unwrap_or_else(join))
            .collect();
        let names = names.map_or_else(|| annotation_names(anns), join);
        (devices, names)
    });
    let mut all = Totals::default();
    let mut total_full = false;
    for (d, _) in &devices {
        total_full |= all.add(&d.totals);
    }
    let (devices, odd): (Vec<DeviceSummary>, Vec<Impossible>) = devices.into_iter().unzip();
    // Which actions occur, from the per-device counts (host traces are searched).
    let any_action = |a: Action| {
        devices
            .iter()
            .any(|d| d.totals.actions.contains_key(snap.actions.name(a)))
            || snap.host_traces.iter().flatten().any(|t| t.has_action(a))
    };
    let overflowed = overflowed(snap);
    let trace = TraceInfo {
        wrapped: devices.iter().any(|d| d.wrapped) || overflowed == Some(true),
        overflowed,
        unmatched_frees: devices.iter().map(|d| d.unmatched_frees).sum(),
        unmatched_segment_frees: devices.iter().map(|d| d.unmatched_segment_frees).sum(),
        pre_trace_blocks: devices.iter().map(|d| d.pre_trace_blocks).sum(),
        replay_mismatches: devices.iter().map(|d| d.replay_mismatches).sum(),
        double_allocs: devices.iter().map(|d| d.double_allocs).sum(),
        time_reversals: devices.iter().map(|d| d.time_reversals).sum(),
        events_without_address: snap.events_without_address,
        first_time_us: devices.iter().filter_map(|d| d.first_time_us).min(),
        last_time_us: devices.iter().filter_map(|d| d.last_time_us).max(),
        has_time_us: snap.metas.iter().any(|m| m.has(flags::TIME)),
    };
    let mut warnings = history_warnings(&trace, &snap.warnings);
    warnings.extend(size_warnings(&devices, &odd, total_full));
    let used_stacks = used_nonempty_stacks(snap);
    let mut used_frames = vec![false; snap.frames.len()];
    for s in &used_stacks {
        for f in snap.stacks.get(*s) {
            used_frames[f.index()] = true;
        }
    }
    Summary {
        schema: SCHEMA,
        file: file.to_string(),
        format: FormatInfo {
            container: snap.format.container,
            pickle_protocol: snap.format.pickle_protocol,
            pickle_style: snap.format.pickle_style,
            compression: snap.format.compression,
            producer: producer_with(snap, &any_action).into(),
            layout: match snap.layout {
                Layout::Dict => "dict",
                Layout::SegmentList => "segment-list",
            }
            .into(),
            era: era_with(snap, &any_action),
        },
        totals: TotalsWithDevices {
            devices: devices.len() as u64,
            totals: all,
        },
        devices,
        trace,
        frames: FrameInfo {
            unique_frames: used_frames.iter().filter(|&&u| u).count() as u64,
            unique_stacks: used_stacks.len() as u64,
        },
        annotations: anns.len() as u64,
        annotation_names,
        top_keys: snap.top_keys.clone(),
        warnings,
    }
}

/// A scoped thread's result (its panic goes on in the caller).
fn join<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Distinct annotation names with their START counts (entries that are not END), most
/// frequent first, at most 20.
fn annotation_names(anns: &[crate::model::Annotation]) -> Vec<(String, u64)> {
    // Counted by borrowed name: a copy of each name was most of the cost.
    let mut names: FastMap<&str, u64> = FastMap::default();
    for a in anns {
        if a.stage.as_deref() != Some("END") {
            *names
                .entry(a.name.as_deref().unwrap_or_default())
                .or_default() += 1;
        }
    }
    let mut counted: Vec<(&str, u64)> = names.into_iter().collect();
    counted.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    counted
        .into_iter()
        .take(20)
        .map(|(n, c)| (n.to_string(), c))
        .collect()
}

/// The loader's warnings, then what the replay found that an allocator cannot do. Each
/// says what was assumed, so the numbers that follow can be read for what they are.
fn history_warnings(t: &TraceInfo, loader: &[String]) -> Vec<String> {
    let mut w = loader.to_vec();
    if t.double_allocs > 0 {
        w.push(format!(
            "{} allocs at an address already live: the trace lost a free; the earlier \
             allocation is taken as freed there",
            t.double_allocs
        ));
    }
    if t.unmatched_frees > 0 {
        w.push(format!(
            "{} frees with no earlier allocation in the trace (recording started late or the \
             ring buffer wrapped): those blocks count as live from the start",
            t.unmatched_frees
        ));
    }
    if t.time_reversals > 0 {
        w.push(format!(
            "{} events have a time_us earlier than the event before them; event order is \
             kept and time ranges use the extremes",
            t.time_reversals
        ));
    }
    w
}

/// What no allocator can hold: sums of sizes past 64 bits (shown stopped at the top, so
/// never wrapped round to small numbers) and blocks larger than their segment.
fn size_warnings(devices: &[DeviceSummary], odd: &[Impossible], total_full: bool) -> Vec<String> {
    let mut w = Vec::new();
    for (d, o) in devices.iter().zip(odd) {
        if o.sums > 0 {
            w.push(format!(
                "device {}: the sizes of its final segments add up past 2^64 - 1 bytes, which no \
                 device holds: {} sums are shown stopped there",
                d.device, o.sums
            ));
        }
        if o.blocks > 0 {
            w.push(if o.blocks == 1 {
                format!("device {}: 1 block is larger than its segment", d.device)
            } else {
                format!(
                    "device {}: {} blocks are larger than their segment",
                    d.device, o.blocks
                )
            });
        }
    }
    if total_full {
        w.push("the devices' byte totals pass 2^64 - 1 bytes: they are shown as 2^64 - 1".into());
    }
    w
}

/// Distinct non-empty stacks referenced anywhere (stacks are interned by content, so
/// distinct ids are distinct stacks). Traces' stacks come from their scans.
fn used_nonempty_stacks(snap: &Snapshot) -> Vec<StackId> {
    let mut used = vec![false; snap.stacks.len()];
    for t in snap.all_traces() {
        for s in t.scan(&snap.metas).used_stacks() {
            if let Some(u) = used.get_mut(s.index()) {
                *u = true;
            }
        }
    }
    let mut mark = |s: StackId| used[s.index()] = true;
    for s in &snap.segments {
        s.stack.into_iter().for_each(&mut mark);
        for b in &s.blocks {
            b.stack.into_iter().for_each(&mut mark);
            for h in b.history.iter().flatten() {
                h.stack.into_iter().for_each(&mut mark);
            }
        }
    }
    (0..used.len() as u32)
        .map(StackId)
        .filter(|&s| used[s.index()] && !snap.stacks.get(s).is_empty())
        .collect()
}
