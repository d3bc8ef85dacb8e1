//! The one in-memory model every analysis reads: interned frames and stacks, columnar
//! trace events per device, segments with their blocks, annotations and settings.

pub(crate) mod addr_map;
mod allocator;
mod annotations;
mod error;
mod event;
mod frames;
pub(crate) mod fxhash;
mod ids;
mod line;
mod scan;
pub mod size;
mod trace;
mod value;

use serde::{Deserialize, Serialize};

pub use allocator::{AllocatorSettings, PoolId};
pub use annotations::{
    AnnotationRange, EventRange, annotation_event_ranges, annotation_ranges, name_family,
};
pub use error::ModelError;
pub use event::{Action, ActionTable, EventMeta, flags};
pub use frames::{Frame, FrameTable, StackTable, Strings};
pub use ids::{FrameId, MetaId, StackId, StrId};
pub use line::Line;
pub use scan::ScanInput;
pub use scan::{ScanCell, TraceScan};
pub use trace::{TimedEvents, Trace};
pub use value::{Extra, Value};

/// How the file was encoded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFormat {
    /// What held the data.
    pub container: Container,
    /// Pickle protocol from the PROTO opcode (`None` for protocols 0 and 1 or non-pickles).
    pub pickle_protocol: Option<u8>,
    /// Which pickler wrote it (`None`: not a pickle).
    pub pickle_style: Option<PickleStyle>,
    /// The compression around it.
    pub compression: Compression,
}

/// Names a format word once: its JSON and text spelling is its serde name.
macro_rules! format_word {
    ($(#[$doc:meta])* $name:ident $(: $extra:ident)? { $($(#[$vdoc:meta])* $variant:ident = $word:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize $(, $extra)?)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $word)] $variant,)*
        }

        impl $name {
            /// The word JSON and text use.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

format_word! {
    /// What held a snapshot's data.
    Container: Default {
        /// A pickle (`_dump_snapshot`).
        #[default]
        Pickle = "pickle",
        /// JSON (the pickle's content as JSON).
        Json = "json",
        /// leakscope's own cache (`leakscope convert`).
        Msgpack = "msgpack",
        /// A Python object read in place (`leakscope.from_snapshot`).
        Object = "object",
    }
}

format_word! {
    /// Which pickler wrote a pickle.
    PickleStyle {
        /// Python's `pickle.dump`.
        Cpython = "cpython",
        /// torch's C++ pickler.
        TorchCpp = "torch-cpp",
    }
}

format_word! {
    /// The compression around a snapshot.
    Compression: Default {
        /// None.
        #[default]
        None = "none",
        /// gzip (`.gz`).
        Gzip = "gzip",
        /// zstd (`.zst`).
        Zstd = "zstd",
    }
}

/// The top-level shape of the data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Layout {
    /// `{"segments", "device_traces", ...}` (PyTorch ≥ 2.0, torch_npu).
    #[default]
    Dict,
    /// A bare list of segments (`torch.cuda.memory_snapshot()`).
    SegmentList,
}

/// Block state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BlockState {
    /// In use by the program.
    ActiveAllocated,
    /// Freed by the program, waiting for other streams (`active_pending_free`).
    ActivePendingFree,
    /// The docstring's spelling of the pending state (`active_awaiting_free`), accepted too.
    ActiveAwaitingFree,
    /// Cached, free.
    Inactive,
    /// Anything else, kept verbatim.
    Other(String),
}

impl BlockState {
    /// Parses the state string.
    pub fn parse(s: &str) -> BlockState {
        match s {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" => BlockState::ActivePendingFree,
            "active_awaiting_free" => BlockState::ActiveAwaitingFree,
            "inactive" => BlockState::Inactive,
            other => BlockState::Other(other.to_string()),
        }
    }

    /// The string as written in the file.
    pub fn as_str(&self) -> &str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::ActiveAwaitingFree => "active_awaiting_free",
            BlockState::Inactive => "inactive",
            BlockState::Other(s) => s,
        }
    }

    /// Allocated or waiting to be freed: memory the program still holds.
    pub fn is_active(&self) -> bool {
        matches!(
            self,
            BlockState::ActiveAllocated
                | BlockState::ActivePendingFree
                | BlockState::ActiveAwaitingFree
        ) || matches!(self, BlockState::Other(s) if s.starts_with("active_"))
    }
}

/// One entry of a 2.0-era block's `history`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// `addr`.
    pub addr: u64,
    /// `real_size`: the bytes requested.
    pub real_size: u64,
    /// `frames`, when present.
    pub stack: Option<StackId>,
    /// Other keys.
    pub extra: Extra,
}

/// A block inside a segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Block {
    /// Address: from the file, or computed from the segment (2.0 files have none).
    pub address: u64,
    /// Whether `address` was in the file.
    pub address_in_file: bool,
    /// Rounded block size.
    pub size: u64,
    /// Bytes the program requested (meaningful for active blocks only).
    pub requested_size: Option<u64>,
    /// State.
    pub state: BlockState,
    /// `frames` (≥ 2.1), when present.
    pub stack: Option<StackId>,
    /// `history` (2.0 / 1.13), when present.
    pub history: Option<Vec<HistoryEntry>>,
    /// Other keys.
    pub extra: Extra,
}

impl Block {
    /// Requested bytes as PyTorch's viewer counts them: `requested_size`, else the first
    /// history entry's `real_size`, else `size`.
    pub fn requested_bytes(&self) -> u64 {
        self.requested_size
            .or_else(|| {
                self.history
                    .as_ref()
                    .and_then(|h| h.first())
                    .map(|h| h.real_size)
            })
            .unwrap_or(self.size)
    }
}

/// A segment: one `cudaMalloc` (or one mapped range of an expandable segment).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// `device` (absent counts as 0).
    pub device: Option<i64>,
    /// Base address.
    pub address: u64,
    /// Reserved bytes.
    pub total_size: u64,
    /// `allocated_size` as stored.
    pub allocated_size: Option<u64>,
    /// `active_size` as stored.
    pub active_size: Option<u64>,
    /// `requested_size` as stored.
    pub requested_size: Option<u64>,
    /// `stream`.
    pub stream: Option<i64>,
    /// `segment_type`: `small` or `large`.
    pub segment_type: Option<String>,
    /// `segment_pool_id` (a 2-tuple; `(0, 0)` is the default pool).
    pub pool_id: Option<Value>,
    /// `is_expandable`.
    pub is_expandable: Option<bool>,
    /// `frames` of the allocation that created the segment.
    pub stack: Option<StackId>,
    /// Blocks in address order.
    pub blocks: Vec<Block>,
    /// torch_npu key order (`segment_pool_id` before `segment_type`).
    pub npu_key_order: bool,
    /// Other keys.
    pub extra: Extra,
}

impl Segment {
    /// The device index (0 when the segment has no `device`).
    pub fn device_index(&self) -> i64 {
        self.device.unwrap_or(0)
    }
}

/// A `record_function` annotation from `external_annotations` (≥ 2.5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Annotation {
    /// `stage`: `START` or `END`.
    pub stage: Option<String>,
    /// `name`.
    pub name: Option<String>,
    /// `device`.
    pub device: Option<i64>,
    /// `time_us`.
    pub time_us: Option<i64>,
    /// Other keys, in file order.
    pub extra: Extra,
}

/// A whole snapshot file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// How the file was encoded (for a cache file: how its source was encoded).
    pub format: SourceFormat,
    /// Top-level shape.
    pub layout: Layout,
    /// Top-level keys in file order (dict layout).
    pub top_keys: Vec<String>,
    /// Interned strings.
    pub strings: Strings,
    /// Interned frames.
    pub frames: FrameTable,
    /// Interned stacks.
    pub stacks: StackTable,
    /// Action names.
    pub actions: ActionTable,
    /// Shared event attributes.
    pub metas: Vec<EventMeta>,
    /// Every segment, all devices.
    pub segments: Vec<Segment>,
    /// `device_traces`: index `i` is device `i`. `None` when the key is absent.
    pub device_traces: Option<Vec<Trace>>,
    /// `allocator_settings` (CUDA ≥ 2.3).
    pub allocator_settings: Option<Value>,
    /// `external_annotations` (CUDA ≥ 2.5).
    pub external_annotations: Option<Vec<Annotation>>,
    /// `host_segments` (pinned host memory, 2026), kept as data.
    pub host_segments: Option<Value>,
    /// `host_traces` (2026): one trace per host list.
    pub host_traces: Option<Vec<Trace>>,
    /// Other top-level keys.
    pub extra: Extra,
    /// Things the loader skipped or could not interpret, counted, never silent.
    pub warnings: Vec<String>,
    /// Trace entries of allocs and frees that had no address: left out of the traces
    /// (no replay can place them), counted here and in a warning.
    #[serde(default)]
    pub events_without_address: u64,
}

/// A view of one device: its segments and its trace.
#[derive(Clone, Debug)]
pub struct DeviceView<'s> {
    /// Device index.
    pub device: i64,
    /// The device's segments, in file order.
    pub segments: Vec<&'s Segment>,
    /// The device's trace (empty when it has none).
    pub trace: &'s Trace,
    /// The snapshot's event attributes, which the trace's `meta` column indexes.
    pub metas: &'s [EventMeta],
}

static EMPTY_TRACE: std::sync::LazyLock<Trace> = std::sync::LazyLock::new(Trace::default);

impl DeviceView<'_> {
    /// The `stream` of event `i` (0, the default stream, when the event has none).
    pub fn stream_of(&self, i: usize) -> i64 {
        self.trace
            .meta
            .get(i)
            .and_then(|m| self.metas.get(m.index()))
            .map_or(0, |m| m.stream)
    }

    /// The `pool_id` of event `i` (recorded since 2026; the default pool when absent).
    pub fn pool_of(&self, i: usize) -> PoolId {
        let meta = self
            .trace
            .meta
            .get(i)
            .and_then(|m| self.metas.get(m.index()));
        PoolId::read(meta.and_then(|m| m.pool_id.as_ref()))
    }

    /// Σ sizes of the blocks allocated at the end, pending frees excluded (as
    /// `torch.cuda.memory_allocated`).
    pub fn allocated_bytes(&self) -> u64 {
        size::sum_sizes(
            self.segments
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state == BlockState::ActiveAllocated)
                .map(|b| b.size),
        )
    }

    /// Σ segment sizes at the end.
    pub fn reserved_bytes(&self) -> u64 {
        size::sum_sizes(self.segments.iter().map(|s| s.total_size))
    }
}

impl Snapshot {
    /// The device indices present: every index of `device_traces` and every segment's device.
    pub fn device_indices(&self) -> Vec<i64> {
        let mut d: Vec<i64> = (0..self.device_traces.as_ref().map_or(0, Vec::len) as i64).collect();
        d.extend(self.segments.iter().map(Segment::device_index));
        d.sort_unstable();
        d.dedup();
        d
    }

    /// The trace of device `d` (empty when there is none).
    pub fn trace(&self, d: i64) -> &Trace {
        usize::try_from(d)
            .ok()
            .and_then(|i| self.device_traces.as_ref()?.get(i))
            .unwrap_or(&EMPTY_TRACE)
    }

    /// A view of every device, in index order.
    pub fn devices(&self) -> Vec<DeviceView<'_>> {
        self.device_indices()
            .into_iter()
            .map(|d| DeviceView {
                device: d,
                segments: self
                    .segments
                    .iter()
                    .filter(|s| s.device_index() == d)
                    .collect(),
                trace: self.trace(d),
                metas: &self.metas,
            })
            .collect()
    }

    /// The meta of event `i` of `trace`.
    pub fn meta(&self, id: MetaId) -> &EventMeta {
        &self.metas[id.index()]
    }

    /// Every trace in the file (devices, then host traces).
    pub fn all_traces(&self) -> impl Iterator<Item = &Trace> {
        self.device_traces
            .iter()
            .flatten()
            .chain(self.host_traces.iter().flatten())
    }

    /// Checks internal consistency (ids in range, column lengths); used after reading a
    /// cache file, whose contents are not trusted.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.stacks.check(self.frames.len())?;
        for f in self.frames.iter() {
            if f.name.index() >= self.strings.len() || f.filename.index() >= self.strings.len() {
                return Err(ModelError::FrameString);
            }
        }
        let nstacks = self.stacks.len();
        let stack_ok = |s: &Option<StackId>| s.is_none_or(|s| s.index() < nstacks);
        for t in self.all_traces() {
            if !t.columns_consistent() {
                return Err(ModelError::TraceColumns);
            }
            if t.stack.iter().any(|s| s.index() >= nstacks) {
                return Err(ModelError::EventStack);
            }
            if t.meta.iter().any(|m| m.index() >= self.metas.len()) {
                return Err(ModelError::EventMeta);
            }
            if t.action.iter().any(|a| a.0 as usize >= self.actions.len()) {
                return Err(ModelError::EventAction);
            }
        }
        for s in &self.segments {
            if !stack_ok(&s.stack) {
                return Err(ModelError::SegmentStack);
            }
            for b in &s.blocks {
                if !stack_ok(&b.stack) || b.history.iter().flatten().any(|h| !stack_ok(&h.stack)) {
                    return Err(ModelError::BlockStack);
                }
            }
        }
        Ok(())
    }

    /// Rebuilds the interning indexes (after deserializing a cache file).
    pub(crate) fn rebuild_indexes(&mut self) {
        self.strings.rebuild_index();
        self.frames.rebuild_index();
        self.stacks.rebuild_index();
    }
}
