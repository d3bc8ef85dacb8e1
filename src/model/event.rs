//! What a trace event is, apart from its columns: its action (known codes and a table
//! for unknown names), which keys its dict carried, and the attributes most events share.

use serde::{Deserialize, Serialize};

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
    /// Older traces: a free with no separate completion; it means what `free_completed`
    /// means (PyTorch's viewer reads it so).
    pub const FREE: Action = Action(12);

    /// Names of the known actions, indexed by code.
    pub const KNOWN: [&'static str; 13] = [
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
        "free",
    ];

    /// A block went back to the allocator: `free_completed`, or an older trace's `free`.
    #[inline]
    pub fn frees(self) -> bool {
        self == Action::FREE_COMPLETED || self == Action::FREE
    }

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
    /// `stream` was beyond `i64::MAX` in the file (an NPU stream pointer written as an
    /// unsigned int); the meta keeps its bits as `i64`.
    pub const STREAM_UNSIGNED: u16 = 1 << 8;
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

    /// An `oom` event's `device_free`: in the `addr` column when the event had no `addr`,
    /// else kept among the other keys. `addr` is the event's `addr` column.
    pub fn device_free(&self, addr: u64) -> Option<u64> {
        if self.has(flags::DEVICE_FREE) {
            return Some(addr);
        }
        self.extra
            .iter()
            .find(|(k, _)| k == "device_free")
            .and_then(|(_, v)| match v {
                Value::Int(i) => u64::try_from(*i).ok(),
                Value::UInt(u) => Some(*u),
                _ => None,
            })
    }
}
