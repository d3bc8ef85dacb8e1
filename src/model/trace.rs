//! Trace events as columns: one vector per field, so a replay touches only what it
//! reads and an event costs 33 bytes however many keys its dict had.

use serde::{Deserialize, Serialize};

use super::ids::{MetaId, StackId};
use super::scan::{ScanCell, TraceScan};
use super::value::{Extra, Value};

/// What happened in a trace event. Known actions have fixed codes; unknown action
/// strings get codes from [`ActionTable`] (never fatal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Action(pub u8);

impl Action {
    /// The allocator returned a block to the program.
    pub const ALLOC: Action = Action(0);
    /// The program freed a block (it may still wait for other streams).
    pub const FREE_REQUESTED: Action = Action(1);
    /// The block went back to the allocator's pool.
    pub const FREE_COMPLETED: Action = Action(2);
    /// `cudaMalloc` of a new segment.
    pub const SEGMENT_ALLOC: Action = Action(3);
    /// `cudaFree` of a segment.
    pub const SEGMENT_FREE: Action = Action(4);
    /// Expandable segments: a range was mapped.
    pub const SEGMENT_MAP: Action = Action(5);
    /// Expandable segments: a range was unmapped.
    pub const SEGMENT_UNMAP: Action = Action(6);
    /// An allocation failed; the event has `device_free` instead of `addr`.
    pub const OOM: Action = Action(7);
    /// A snapshot was taken (`size` = active bytes).
    pub const SNAPSHOT: Action = Action(8);
    /// torch_npu: synthetic entry for a live workspace block.
    pub const WORKSPACE_SNAPSHOT: Action = Action(9);
    /// 2026: `_annotate_memory`.
    pub const ANNOTATE: Action = Action(10);
    /// mid-2024 nightlies: record_function START/END stored as trace entries.
    pub const USER_DEFINED: Action = Action(11);

    /// Names of the known actions, indexed by code.
    pub const KNOWN: [&'static str; 12] = [
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "oom",
        "snapshot",
        "workspace_snapshot",
        "annotate",
        "user_defined",
    ];

    /// True for codes that are not one of [`Action::KNOWN`].
    pub fn is_unknown(self) -> bool {
        self.0 as usize >= Self::KNOWN.len()
    }
}

/// Action names: the known ones first, then unknown strings in order of appearance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionTable {
    names: Vec<String>,
}

impl Default for ActionTable {
    fn default() -> Self {
        ActionTable {
            names: Action::KNOWN.iter().map(|s| s.to_string()).collect(),
        }
    }
}

impl ActionTable {
    /// The code for `name`, adding unknown names; `None` once 256 codes are taken.
    pub fn code(&mut self, name: &str) -> Option<Action> {
        if let Some(i) = Action::KNOWN.iter().position(|k| *k == name) {
            return Some(Action(i as u8));
        }
        if let Some(i) = self.names[Action::KNOWN.len()..]
            .iter()
            .position(|k| k == name)
        {
            return Some(Action((i + Action::KNOWN.len()) as u8));
        }
        if self.names.len() >= 256 {
            return None;
        }
        self.names.push(name.to_string());
        Some(Action((self.names.len() - 1) as u8))
    }

    /// The name of `action`.
    pub fn name(&self, action: Action) -> &str {
        self.names
            .get(action.0 as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    /// Number of codes in use.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Never empty: the known actions are always there.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Which keys an event dict carried, so an export writes back exactly what was read.
pub mod flags {
    /// `addr` present.
    pub const ADDR: u16 = 1;
    /// `device_free` present (oom events; stored in the `addr` column).
    pub const DEVICE_FREE: u16 = 1 << 1;
    /// `size` present.
    pub const SIZE: u16 = 1 << 2;
    /// `stream` present.
    pub const STREAM: u16 = 1 << 3;
    /// `time_us` present.
    pub const TIME: u16 = 1 << 4;
    /// `frames` present (it is optional: `context="alloc"` omits it on frees).
    pub const FRAMES: u16 = 1 << 5;
    /// The address was negative in the file (the C++ pickler casts pointers to int64); the
    /// model stores the pointer as unsigned, like every other address.
    pub const ADDR_NEGATIVE: u16 = 1 << 6;
    /// C++ pickler key order: `time_us` after `user_metadata`.
    pub const TIME_LATE: u16 = 1 << 7;
}

/// Attributes that most events share, interned once per distinct combination.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventMeta {
    /// Which keys were present ([`flags`]).
    pub flags: u16,
    /// `stream` (a stream pointer as int; 0 is the default stream).
    pub stream: i64,
    /// `compile_context` (≥ 2.8).
    pub compile_context: Option<String>,
    /// `user_metadata` (≥ 2.10).
    pub user_metadata: Option<String>,
    /// `pool_id` (2026).
    pub pool_id: Option<Value>,
    /// Other keys, in file order.
    pub extra: Extra,
}

impl EventMeta {
    /// True when the event dict had the key(s) behind `flag`.
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// One device's trace, oldest event first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// Action code per event.
    pub action: Vec<Action>,
    /// `addr` (or `device_free` for oom events) per event.
    pub addr: Vec<u64>,
    /// `size` per event: requested bytes for alloc and frees, segment bytes for segment events.
    pub size: Vec<u64>,
    /// `time_us` per event (0 where absent; see the meta flags).
    pub time_us: Vec<i64>,
    /// Stack per event ([`StackId::EMPTY`] when `frames` was absent or empty).
    pub stack: Vec<StackId>,
    /// Shared attributes per event, into [`crate::model::Snapshot::metas`].
    pub meta: Vec<MetaId>,
    /// The trace's [`TraceScan`] once computed (see [`Trace::scan`]).
    #[serde(skip)]
    pub scan_cell: ScanCell,
}

impl Trace {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.action.len()
    }

    /// True when the trace holds no event.
    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }

    /// Whether any event has action `a`. It counts rather than stopping at the first
    /// match, because the counting loop is vectorised: on a trace without `a` (the
    /// common case) that is many times faster than a search.
    pub fn has_action(&self, a: Action) -> bool {
        self.action
            .iter()
            .map(|x| (x.0 == a.0) as usize)
            .sum::<usize>()
            > 0
    }

    /// This trace's [`TraceScan`]: the one the loader computed ahead (for long traces, on
    /// the second core), or computed now. `metas` are the snapshot's. A scan describes
    /// the columns as they were when it was computed: [`Trace::push`] forgets it, and
    /// code that writes the columns directly must call [`ScanCell::clear`].
    pub fn scan(&self, metas: &[EventMeta]) -> &TraceScan {
        self.scan_cell
            .get_or_init(|| TraceScan::of(self, &TraceScan::timed(metas)))
    }

    /// Reserves room for `n` more events in every column.
    pub fn reserve(&mut self, n: usize) {
        self.action.reserve(n);
        self.addr.reserve(n);
        self.size.reserve(n);
        self.time_us.reserve(n);
        self.stack.reserve(n);
        self.meta.reserve(n);
    }

    /// Appends one event.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        action: Action,
        addr: u64,
        size: u64,
        time_us: i64,
        stack: StackId,
        meta: MetaId,
    ) {
        self.scan_cell.clear();
        self.action.push(action);
        self.addr.push(addr);
        self.size.push(size);
        self.time_us.push(time_us);
        self.stack.push(stack);
        self.meta.push(meta);
    }

    pub(crate) fn columns_consistent(&self) -> bool {
        let n = self.action.len();
        self.addr.len() == n
            && self.size.len() == n
            && self.time_us.len() == n
            && self.stack.len() == n
            && self.meta.len() == n
    }
}
