//! Our own pickle reader: a stack machine over borrowed bytes that builds plain data
//! (None, bools, ints, floats, strings, bytes, lists, dicts, tuples) and nothing else.
//!
//! Why not a general unpickler: snapshots are large and repetitive, so values are small
//! `Copy` handles into flat tables ([`Heap`]); strings stay borrowed from the input; the
//! memo is a dense `Vec` (pickle numbers memo slots sequentially) and holds handles, so
//! containers referenced while still being filled (CPython memoizes before filling) just
//! work. Opcodes that import or call code are refused, never executed. A [`Absorb`] hook
//! lets the snapshot builder turn trace-entry dicts into columnar records as soon as they
//! are appended, so they never accumulate as dicts.

use std::borrow::Cow;

use crate::error::LoadErrorKind;

pub(crate) use super::handle::Value;

/// The fields of one trace entry, before interning. Filled either from a dict (the general
/// path) or straight from the bytes (the fast path in [`Machine::run`]).
#[derive(Default, Clone, Copy)]
pub(crate) struct PendingEvent {
    pub action: Option<Value>,
    pub addr: Option<i128>,
    pub device_free: Option<i128>,
    pub size: Option<i128>,
    pub stream: Option<i128>,
    pub time_us: Option<i128>,
    /// `time_us` came after `user_metadata` (the C++ pickler's key order).
    pub time_after_user_metadata: bool,
    pub compile_context: Option<Value>,
    pub user_metadata: Option<Value>,
    pub pool_id: Option<Value>,
    /// The `frames` value (general path).
    pub frames: Option<Value>,
    /// The interned `frames` (fast path).
    pub stack: Option<crate::model::StackId>,
}

impl Value {
    /// Either kind of string.
    #[inline]
    pub fn is_str(self) -> bool {
        matches!(self, Value::Str(_) | Value::Span(_))
    }
}

/// Memo back-reference of a dict slot: none, exactly one memo index, or several.
const NO_MEMO: u32 = u32::MAX;
const MANY_MEMO: u32 = u32::MAX - 1;

/// Storage of a list.
pub(crate) enum ListSlot {
    Items(Vec<Value>),
    /// Reduced by the builder to an interned stack.
    Stack(crate::model::StackId),
    /// Reduced by the builder to a columnar trace (index into the builder's traces).
    Events(u32),
}

/// Storage of a dict.
pub(crate) enum DictSlot {
    Items {
        items: Vec<(Value, Value)>,
        memo: u32,
    },
    /// Reduced by the builder to an interned frame.
    Frame(crate::model::FrameId),
    /// Recycled (its trace entry became a record); the vector keeps its capacity so the
    /// next dict needs no allocation.
    Free(Vec<(Value, Value)>),
}

/// What the builder did with appended items.
pub(crate) enum Absorbed {
    /// Nothing: the machine appends them to the list.
    No,
    /// The builder stored them itself (as trace records or an interned stack).
    Taken,
}

/// The value tables a pickle builds.
#[derive(Default)]
pub(crate) struct Heap<'a> {
    /// The input, which [`Value::Span`] strings point into.
    pub data: &'a [u8],
    pub strs: Vec<Cow<'a, str>>,
    pub bytes: Vec<Cow<'a, [u8]>>,
    pub bigs: Vec<i128>,
    pub lists: Vec<ListSlot>,
    pub dicts: Vec<DictSlot>,
    pub(super) free_dicts: Vec<u32>,
    pub tuples: Vec<Value>,
    pub tuple_spans: Vec<(u32, u32)>,
    pub memo: super::memo::Memo,
    /// Trace entries decoded by the fast path, until their APPENDS.
    pub pending: Vec<PendingEvent>,
    /// Slots freed by [`Heap::collect`](super::collect), reused before the tables grow.
    pub(super) free_lists: Vec<u32>,
    pub(super) free_tuples: Vec<u32>,
    pub(super) free_strs: Vec<u32>,
    pub(super) free_bytes: Vec<u32>,
    pub(super) free_bigs: Vec<u32>,
    /// Bytes of the lists' and dicts' item vectors (their capacity), counted where they
    /// grow and recounted exactly by each collection.
    pub(super) item_bytes: usize,
    /// Bytes of strings the heap owns (decoded rather than borrowed from the input).
    pub(super) owned_str_bytes: usize,
    /// `data` is a private map of a file: long strings give back their pages as they are
    /// read and copied ([`super::long_str`]).
    pub(super) file_map: bool,
    /// Every value has one parent (JSON: nothing is shared), so a frame dict is garbage
    /// once its frames list is interned.
    pub(super) tree: bool,
}

impl<'a> Heap<'a> {
    pub fn new_list(&mut self, items: Vec<Value>) -> Value {
        self.item_bytes += items.capacity() * size_of::<Value>();
        Value::List(reuse(
            &mut self.lists,
            &mut self.free_lists,
            ListSlot::Items(items),
        ))
    }

    /// A new dict; reuses a recycled slot and its vector when there is one.
    #[inline]
    pub fn new_dict(&mut self, items: Vec<(Value, Value)>) -> Value {
        if let Some(i) = self.free_dicts.pop() {
            let slot = &mut self.dicts[i as usize];
            let items = match slot {
                DictSlot::Free(spare) if items.is_empty() => std::mem::take(spare),
                _ => {
                    self.item_bytes += items.capacity() * size_of::<(Value, Value)>();
                    items
                }
            };
            *slot = DictSlot::Items {
                items,
                memo: NO_MEMO,
            };
            Value::Dict(i)
        } else {
            self.item_bytes += items.capacity() * size_of::<(Value, Value)>();
            self.dicts.push(DictSlot::Items {
                items,
                memo: NO_MEMO,
            });
            Value::Dict((self.dicts.len() - 1) as u32)
        }
    }

    /// Takes a dict's items out for reading; give them back with [`Heap::recycle_dict`].
    pub fn take_dict_items(&mut self, i: u32) -> Option<Vec<(Value, Value)>> {
        match &mut self.dicts[i as usize] {
            DictSlot::Items { items, .. } => Some(std::mem::take(items)),
            _ => None,
        }
    }

    /// Marks a dict as interned to a frame; its memo entry then yields the frame directly.
    pub fn set_dict_frame(&mut self, i: u32, frame: crate::model::FrameId) {
        if let DictSlot::Items { memo, .. } = self.dicts[i as usize]
            && memo < MANY_MEMO
        {
            self.memo.set(memo as usize, Value::Frame(frame));
        }
        self.dicts[i as usize] = DictSlot::Frame(frame);
    }

    /// Frees the frame dicts among `items` once their list is interned, where nothing
    /// else can refer to them ([`Heap::tree`]).
    pub fn forget_frames(&mut self, items: &[Value]) {
        if !self.tree {
            return;
        }
        for &v in items {
            if let Value::Dict(d) = v
                && let Some(slot @ DictSlot::Frame(_)) = self.dicts.get_mut(d as usize)
            {
                *slot = DictSlot::Free(Vec::new());
                self.free_dicts.push(d);
            }
        }
    }

    pub fn new_tuple(&mut self, items: &[Value]) -> Value {
        let start = self.tuples.len() as u32;
        self.tuples.extend_from_slice(items);
        let span = (start, items.len() as u32);
        Value::Tuple(reuse(&mut self.tuple_spans, &mut self.free_tuples, span))
    }

    pub fn new_str(&mut self, s: Cow<'a, str>) -> Value {
        if let Cow::Owned(o) = &s {
            self.owned_str_bytes += o.capacity();
        }
        Value::Str(reuse(&mut self.strs, &mut self.free_strs, s))
    }

    pub fn new_bytes(&mut self, b: &'a [u8]) -> Value {
        Value::Bytes(reuse(
            &mut self.bytes,
            &mut self.free_bytes,
            Cow::Borrowed(b),
        ))
    }

    pub fn new_big(&mut self, v: i128) -> Value {
        Value::Big(reuse(&mut self.bigs, &mut self.free_bigs, v))
    }

    /// Bytes of the slots freed by the last collection and not yet reused.
    pub fn free_slot_bytes(&self) -> usize {
        self.free_lists.len() * size_of::<ListSlot>()
            + self.free_dicts.len() * size_of::<DictSlot>()
            + self.free_tuples.len() * size_of::<(u32, u32)>()
            + self.free_strs.len() * size_of::<Cow<'_, str>>()
            + self.free_bytes.len() * size_of::<Cow<'_, [u8]>>()
            + self.free_bigs.len() * size_of::<i128>()
    }

    /// Bytes the heap holds: its tables by capacity (what was allocated), the items of
    /// its containers, the strings it owns and the memo's slots. Strings borrowed from
    /// the input are the input's, not counted here.
    pub fn held_bytes(&self) -> usize {
        fn cap<T>(v: &Vec<T>) -> usize {
            v.capacity() * size_of::<T>()
        }
        cap(&self.strs)
            + self.owned_str_bytes
            + cap(&self.bytes)
            + cap(&self.bigs)
            + cap(&self.lists)
            + cap(&self.dicts)
            + cap(&self.free_dicts)
            + self.item_bytes
            + cap(&self.tuples)
            + cap(&self.tuple_spans)
            + cap(&self.pending)
            + cap(&self.free_lists)
            + cap(&self.free_tuples)
            + cap(&self.free_strs)
            + cap(&self.free_bytes)
            + cap(&self.free_bigs)
            + self.memo.held_bytes()
    }

    pub fn str(&self, i: u32) -> &str {
        &self.strs[i as usize]
    }

    pub fn tuple(&self, i: u32) -> &[Value] {
        let (s, n) = self.tuple_spans[i as usize];
        &self.tuples[s as usize..(s + n) as usize]
    }

    /// The string, when `v` is one.
    pub fn as_str(&self, v: Value) -> Option<&str> {
        match v {
            Value::Str(i) => Some(self.str(i)),
            Value::Span(x) => {
                let (off, len) = ((x >> 16) as usize, (x & 0xffff) as usize);
                let b = self.data.get(off..off + len)?;
                // SAFETY: spans are made only by `Machine::span`, after checking that
                // exactly these bytes are UTF-8.
                Some(unsafe { std::str::from_utf8_unchecked(b) })
            }
            _ => None,
        }
    }

    /// An owned copy of the string `v` (a long one copied without holding the input's
    /// pages too; see [`super::long_str`]).
    pub fn string(&self, v: Value) -> Option<String> {
        self.as_str(v)
            .map(|s| super::long_str::copy(s, self.file_map))
    }

    /// The items of a dict that has not been reduced.
    pub fn dict_items(&self, i: u32) -> Option<&[(Value, Value)]> {
        match &self.dicts[i as usize] {
            DictSlot::Items { items, .. } => Some(items),
            _ => None,
        }
    }

    /// Recycles a dict whose contents became a record, so trace entries do not pile up as
    /// dict slots. A memo entry pointing at it is turned into [`Value::Gone`].
    /// `items` are the dict's items taken with [`Heap::take_dict_items`].
    pub fn recycle_dict(&mut self, i: u32, mut items: Vec<(Value, Value)>) {
        if let DictSlot::Items { memo, items: slot } = &mut self.dicts[i as usize] {
            if *memo == MANY_MEMO {
                *slot = items; // referenced from several memo slots: keep it, it is rare
                return;
            }
            if *memo != NO_MEMO {
                self.memo.set(*memo as usize, Value::Gone);
            }
            items.clear();
            self.dicts[i as usize] = DictSlot::Free(items);
            self.free_dicts.push(i);
        }
    }

    fn note_memo(&mut self, v: Value, idx: u32) {
        if let Value::Dict(d) = v
            && let DictSlot::Items { memo, .. } = &mut self.dicts[d as usize]
        {
            *memo = if *memo == NO_MEMO { idx } else { MANY_MEMO };
        }
    }
}

/// Puts `item` in a freed slot of `table` when there is one, else at its end; its index.
#[inline]
fn reuse<T>(table: &mut Vec<T>, free: &mut Vec<u32>, item: T) -> u32 {
    match free.pop() {
        Some(i) => {
            table[i as usize] = item;
            i
        }
        None => {
            table.push(item);
            (table.len() - 1) as u32
        }
    }
}

/// The builder's hook into appends.
pub(crate) trait Absorb<'a> {
    /// Called when `items` are appended to `list`; `single` for a one-item APPEND, which
    /// protocols 0 and 1 use for every item.
    fn absorb(
        &mut self,
        heap: &mut Heap<'a>,
        list: u32,
        items: &[Value],
        single: bool,
        offset: u64,
    ) -> Result<Absorbed, LoadErrorKind>;

    /// Interns a complete frames list the machine decoded itself.
    fn intern_stack(&mut self, frames: &[crate::model::FrameId]) -> crate::model::StackId;

    /// Appends a trace entry decoded by the fast path to trace `trace`.
    fn append_event(
        &mut self,
        heap: &mut Heap<'a>,
        trace: u32,
        ev: &PendingEvent,
        offset: u64,
    ) -> Result<(), LoadErrorKind>;

    /// The [`super::fields`] code of a dict key.
    fn field_of(&mut self, heap: &Heap<'a>, key: Value) -> u8;

    /// The growing vectors this side writes (for [`super::prefault`]).
    fn regions(&self, _out: &mut Vec<super::prefault::Region>) {}

    /// Bytes this side holds (the model built so far), for the memory bound.
    fn held_bytes(&self) -> usize {
        0
    }

    /// How many more bytes this side may take before the machine checks again: owned
    /// copies made inside one call (a shared value expanded) are charged against it.
    fn set_room(&mut self, _room: usize) {}

    /// A collection freed string slots: forget whatever is keyed by them.
    fn strings_freed(&mut self) {}
}

/// Facts about the encoding, for `summary`'s format section.
#[derive(Debug, Default, Clone)]
pub(crate) struct Stats {
    pub protocol: Option<u8>,
    /// LONG1 values longer than their minimal encoding (the C++ pickler writes 8 bytes).
    pub long1_padded: u64,
    /// `MARK` immediately closed by APPENDS/SETITEMS (the C++ pickler does it for empty containers).
    pub empty_batches: u64,
    pub memoize_ops: u64,
    pub put_ops: u64,
    /// Offset just past STOP.
    pub end: u64,
}

/// Deepest MARK nesting accepted, far above any snapshot (which needs about 6).
const MAX_MARKS: usize = 100_000;
/// How far beyond the current memo size a PUT index may point: real picklers number
/// slots densely, so a far index is an attack on memory, not data.
const MEMO_SLACK: usize = 1 << 16;

pub(crate) struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    pub heap: Heap<'a>,
    pub stats: Stats,
    frame_scratch: Vec<crate::model::FrameId>,
    /// The trace entry the fast path is decoding.
    event: PendingEvent,
    /// Field code of each memo entry used as a trace-entry key (memo entries are
    /// write-once under MEMOIZE; a PUT that overwrites one clears this).
    key_fields: Vec<u8>,
    /// Stacks of frames-list bodies already decoded, by their bytes. Valid while the
    /// memo entries they refer to are unchanged, so a PUT that overwrites one clears it,
    /// like `key_fields`.
    list_bodies: super::bodies::ListBodies,
    /// Decompressed input still being written: `data` is what is published of it so far.
    source: Option<&'a super::inflate::Inflated>,
    /// Heap bytes past which the next check collects (twice what the last one left).
    collect_at: usize,
}

/// Input read between two checks of the memory bound: at most 32 bytes are held per
/// byte read, so the bound is overshot by at most 8 MiB between checks.
const CHECK_EVERY: usize = 256 << 10;
/// The heap collects only once it has grown this much since the last collection: below
/// it, freeing is not worth a pass.
const COLLECT_FLOOR: usize = 16 << 20;

type R<T> = Result<T, LoadErrorKind>;

fn opcode_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'i' => "INST",
        b'o' => "OBJ",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

impl<'a> Machine<'a> {
    /// A machine over decompressed input still being written, expecting about
    /// `expected` bytes (sizes the memo).
    pub fn following(source: &'a super::inflate::Inflated, expected: usize) -> Self {
        let mut m = Machine::with_memo(source.wait_for(1), expected);
        m.source = Some(source);
        m
    }

    pub fn new(data: &'a [u8]) -> Self {
        Machine::with_memo(data, data.len())
    }

    fn with_memo(data: &'a [u8], expected: usize) -> Self {
        Machine {
            data,
            pos: 0,
            stack: Vec::with_capacity(4096),
            marks: Vec::with_capacity(64),
            heap: Heap {
                data,
                // Real snapshots memoize about one object per 70 bytes. Growing the memo by
                // doubling copied it into fresh pages each time (half the load's page
                // faults, measured); address space reserved up front is only backed by
                // memory where it is written.
                memo: super::memo::Memo::with_capacity((expected / 32).min(1 << 28)),
                ..Heap::default()
            },
            stats: Stats::default(),
            frame_scratch: Vec::with_capacity(256),
            event: PendingEvent::default(),
            key_fields: Vec::new(),
            list_bodies: Default::default(),
            source: None,
            collect_at: COLLECT_FLOOR,
        }
    }

    /// Bytes the machine holds: its stack, marks, caches and heap.
    pub fn held_bytes(&self) -> usize {
        self.stack.capacity() * size_of::<Value>()
            + self.marks.capacity() * size_of::<usize>()
            + self.key_fields.capacity()
            + self.list_bodies.held_bytes()
            + self.heap.held_bytes()
    }

    /// Keeps the load within [`super::bound`] at input offset `at`: collects the heap when
    /// it has doubled since the last collection (or the bound is passed), then refuses the
    /// input if what is held is still past the bound.
    #[cold]
    pub(crate) fn check_memory<A: Absorb<'a>>(&mut self, absorb: &mut A, at: usize) -> R<()> {
        let read = at;
        let mut held = self.held_bytes();
        let limit = super::bound::allowed(read);
        if held > self.collect_at || held + absorb.held_bytes() > limit {
            let c = self.heap.collect(&self.stack);
            if c.strings_freed {
                absorb.strings_freed();
            }
            let len = self.stack.len();
            if self.stack.capacity() > 2 * len + 4096 {
                self.stack.shrink_to(2 * len + 4096);
            }
            held = self.held_bytes();
            // Freed slots are reused before the tables grow: the next collection is due
            // once the heap has grown by what is live (or the floor), not by its tables.
            let live = held.saturating_sub(self.heap.free_slot_bytes());
            self.collect_at = held + COLLECT_FLOOR.max(live);
        }
        let room = super::bound::room(held + absorb.held_bytes(), read, Some(at as u64), "")?;
        absorb.set_room(room);
        Ok(())
    }

    /// Waits for input up to `end` when it is still being decompressed; whether it is
    /// there now. Input that is all there already never has more.
    #[cold]
    fn more(&mut self, end: usize) -> bool {
        let Some(src) = self.source else {
            return false;
        };
        let data = src.wait_for(end);
        self.data = data;
        self.heap.data = data;
        data.len() >= end
    }

    /// The trace under the innermost MARK, when the list there is one, after appending
    /// to it whatever waits above the MARK (an entry the general path decoded, say), so
    /// that the next entry can go straight in and order is kept. `at` places errors.
    fn direct_target<A: Absorb<'a>>(&mut self, absorb: &mut A, at: usize) -> R<Option<u32>> {
        let Some(&mark) = self.marks.last() else {
            return Ok(None);
        };
        let Some(&Value::List(l)) = mark.checked_sub(1).and_then(|i| self.stack.get(i)) else {
            return Ok(None);
        };
        let ListSlot::Events(t) = self.heap.lists[l as usize] else {
            return Ok(None);
        };
        if self.stack.len() > mark && self.stack.last() != Some(&Value::Appended) {
            absorb.absorb(&mut self.heap, l, &self.stack[mark..], false, at as u64)?;
            self.stack.truncate(mark);
        }
        Ok(Some(t))
    }

    #[inline]
    fn take(&mut self, n: usize, what: &'static str) -> R<&'a [u8]> {
        let mut end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        if end.is_none()
            && let Some(e) = self.pos.checked_add(n)
            && self.more(e)
        {
            end = Some(e);
        }
        match end {
            Some(end) => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(LoadErrorKind::Truncated {
                offset: self.data.len() as u64,
                what,
            }),
        }
    }

    #[inline]
    fn u8(&mut self, what: &'static str) -> R<u8> {
        Ok(self.take(1, what)?[0])
    }

    #[inline]
    fn u32le(&mut self, what: &'static str) -> R<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64le(&mut self, what: &'static str) -> R<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn line(&mut self, what: &'static str) -> R<&'a [u8]> {
        let mut rest = &self.data[self.pos..];
        let mut newline = rest.iter().position(|&c| c == b'\n');
        while newline.is_none() && self.more(self.data.len() + 1) {
            rest = &self.data[self.pos..];
            newline = rest.iter().position(|&c| c == b'\n');
        }
        match newline {
            Some(n) => {
                let l = &rest[..n];
                self.pos += n + 1;
                Ok(l)
            }
            None => Err(LoadErrorKind::Truncated {
                offset: self.data.len() as u64,
                what,
            }),
        }
    }

    fn malformed(&self, at: usize, message: impl Into<String>) -> LoadErrorKind {
        LoadErrorKind::Malformed {
            offset: at as u64,
            message: message.into(),
        }
    }

    #[inline]
    fn pop(&mut self, at: usize) -> R<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed(
                at,
                "stack underflow (an opcode needs a value that is not there)",
            ));
        }
        Ok(self.stack.pop().unwrap_or(Value::None))
    }

    #[inline]
    fn top_mut(&mut self, at: usize) -> R<&mut Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed(
                at,
                "stack underflow (an opcode needs a value that is not there)",
            ));
        }
        let n = self.stack.len();
        Ok(&mut self.stack[n - 1])
    }

    fn pop_mark(&mut self, at: usize) -> R<usize> {
        self.marks
            .pop()
            .ok_or_else(|| self.malformed(at, "no MARK before an opcode that needs one"))
    }

    /// The text of a UTF-8 string opcode's bytes. CPython writes a string holding lone
    /// surrogates (a file name decoded with `surrogateescape`, say) with `surrogatepass`:
    /// those three-byte sequences become U+FFFD each; any other invalid byte is an error.
    #[inline]
    fn utf8(&self, b: &'a [u8], at: usize) -> R<Cow<'a, str>> {
        if b.is_ascii() {
            // SAFETY: ASCII is valid UTF-8 (and checking it is much cheaper).
            return Ok(Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(b) }));
        }
        let checked = if b.len() >= super::long_str::LONG {
            super::long_str::validate(b, self.heap.file_map)
        } else {
            std::str::from_utf8(b)
                .map(|_| ())
                .map_err(|e| e.valid_up_to())
        };
        match checked {
            // SAFETY: validated just above.
            Ok(()) => Ok(Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(b) })),
            Err(bad) => replace_surrogates(b, bad).map(Cow::Owned).map_err(|bad| {
                self.malformed(
                    at,
                    format!("string is not valid UTF-8 (bad byte at string offset {bad})"),
                )
            }),
        }
    }

    fn push_int(&mut self, v: i128) {
        let val = if let Ok(i) = i64::try_from(v) {
            Value::Int(i)
        } else {
            self.heap.new_big(v)
        };
        self.stack.push(val);
    }

    fn memo_put(&mut self, idx: usize, at: usize) -> R<()> {
        let v = *self.top_mut(at)?;
        let memo = &mut self.heap.memo;
        if idx < memo.len() {
            memo.set(idx, v);
            self.key_fields.clear();
            self.list_bodies.clear();
        } else if idx <= memo.len() + MEMO_SLACK {
            memo.pad_to(idx);
            memo.push(v);
        } else {
            return Err(self.malformed(
                at,
                format!(
                    "memo index {idx} is far beyond the {} entries stored so far; picklers number memo slots densely",
                    self.heap.memo.len()
                ),
            ));
        }
        self.heap.note_memo(v, idx as u32);
        Ok(())
    }

    #[inline]
    fn memo_get(&mut self, idx: usize, at: usize) -> R<()> {
        match self.heap.memo.get(idx) {
            Some(Value::Gone) => Err(self.malformed(
                at,
                format!("memo entry {idx} refers to a trace entry that was already consumed; trace entries are never shared in a snapshot"),
            )),
            Some(v) => {
                self.stack.push(v);
                Ok(())
            }
            None => Err(self.malformed(
                at,
                format!(
                    "memo index {idx} out of range ({} entries stored)",
                    self.heap.memo.len()
                ),
            )),
        }
    }

    fn append_items<A: Absorb<'a>>(
        &mut self,
        list: Value,
        from: usize,
        absorb: &mut A,
        at: usize,
    ) -> R<()> {
        let Value::List(l) = list else {
            return Err(self.malformed(at, "APPEND(S) target is not a list"));
        };
        if from == self.stack.len() {
            self.stats.empty_batches += 1;
            return Ok(());
        }
        let single = self.stack.len() - from == 1 && self.data.get(at) == Some(&b'a');
        match absorb.absorb(&mut self.heap, l, &self.stack[from..], single, at as u64)? {
            Absorbed::No => match &mut self.heap.lists[l as usize] {
                ListSlot::Items(v) => {
                    let before = v.capacity();
                    v.extend_from_slice(&self.stack[from..]);
                    self.heap.item_bytes += (v.capacity() - before) * size_of::<Value>();
                }
                _ => return Err(self.malformed(at, "APPEND(S) to a list already reduced")),
            },
            Absorbed::Taken => {}
        }
        self.stack.truncate(from);
        Ok(())
    }

    fn set_items(&mut self, dict: Value, from: usize, at: usize) -> R<()> {
        let Value::Dict(d) = dict else {
            return Err(self.malformed(at, "SETITEM(S) target is not a dict"));
        };
        let n = self.stack.len() - from;
        if n == 0 {
            self.stats.empty_batches += 1;
            return Ok(());
        }
        if n % 2 != 0 {
            return Err(self.malformed(at, "SETITEMS with an odd number of values"));
        }
        match &mut self.heap.dicts[d as usize] {
            DictSlot::Items { items, .. } => {
                let before = items.capacity();
                for kv in self.stack[from..].chunks_exact(2) {
                    items.push((kv[0], kv[1]));
                }
                self.heap.item_bytes += (items.capacity() - before) * size_of::<(Value, Value)>();
            }
            _ => return Err(self.malformed(at, "SETITEM(S) to a dict already reduced")),
        }
        self.stack.truncate(from);
        Ok(())
    }

    /// Runs to STOP and returns the top value. `progress` is called with the offset
    /// every few MiB.
    ///
    /// The opcodes that make up nearly all of a snapshot (memo references, small ints,
    /// short strings, container starts) are decoded here with the position in a local;
    /// the rest go through [`Machine::step`].
    pub fn run<A: Absorb<'a>>(
        &mut self,
        absorb: &mut A,
        progress: &mut dyn FnMut(usize, &[super::prefault::Region]),
    ) -> R<Value> {
        const STEP: usize = 4 << 20;
        // Past each report the input is made available a step ahead (and the fast paths'
        // look-ahead beyond), so they rarely meet its end in the middle of the stream.
        const AHEAD: usize = STEP + (1 << 20);
        let mut data = self.data;
        let mut next_check = CHECK_EVERY;
        let mut next_report = STEP;
        let mut pos = self.pos;
        let mut regions = Vec::new();
        absorb.set_room(super::bound::allowed(0));
        loop {
            if pos >= next_check {
                self.pos = pos;
                self.check_memory(absorb, pos)?;
                next_check = pos + CHECK_EVERY;
                if pos >= next_report {
                    regions.clear();
                    regions.push(self.heap.memo.region());
                    absorb.regions(&mut regions);
                    progress(pos, &regions);
                    next_report = pos + STEP;
                    if self.source.is_some() {
                        self.more(pos + AHEAD);
                        data = self.data;
                    }
                }
            }
            let Some(&op) = data.get(pos) else {
                if self.more(pos + 1) {
                    data = self.data;
                    continue;
                }
                self.pos = pos;
                return Err(LoadErrorKind::Truncated {
                    offset: data.len() as u64,
                    what: "an opcode (no STOP at the end)",
                });
            };
            match op {
                b'h' if pos + 1 < data.len() => {
                    let i = data[pos + 1] as usize;
                    self.memo_get(i, pos)?;
                    pos += 2;
                }
                b'j' if pos + 4 < data.len() => {
                    let i = u32::from_le_bytes([
                        data[pos + 1],
                        data[pos + 2],
                        data[pos + 3],
                        data[pos + 4],
                    ]);
                    self.memo_get(i as usize, pos)?;
                    pos += 5;
                }
                0x94 => {
                    self.stats.memoize_ops += 1;
                    let idx = self.heap.memo.len();
                    self.memo_put(idx, pos)?;
                    pos += 1;
                }
                b'(' if self.marks.len() < MAX_MARKS => {
                    self.marks.push(self.stack.len());
                    pos += 1;
                }
                b'K' if pos + 1 < data.len() => {
                    self.stack.push(Value::Int(data[pos + 1] as i64));
                    pos += 2;
                }
                b'M' if pos + 2 < data.len() => {
                    self.stack.push(Value::Int(
                        u16::from_le_bytes([data[pos + 1], data[pos + 2]]) as i64,
                    ));
                    pos += 3;
                }
                b'J' if pos + 4 < data.len() => {
                    let v = i32::from_le_bytes([
                        data[pos + 1],
                        data[pos + 2],
                        data[pos + 3],
                        data[pos + 4],
                    ]);
                    self.stack.push(Value::Int(v as i64));
                    pos += 5;
                }
                0x8a if pos + 1 < data.len()
                    && (data[pos + 1] as usize) <= 8
                    && pos + 2 + data[pos + 1] as usize <= data.len() =>
                {
                    let n = data[pos + 1] as usize;
                    let b = &data[pos + 2..pos + 2 + n];
                    let mut a = [0u8; 8];
                    a[..n].copy_from_slice(b);
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        for x in &mut a[n..] {
                            *x = 0xff; // sign-extend
                        }
                    }
                    if n >= 2 {
                        let last = b[n - 1];
                        let prev_sign = b[n - 2] & 0x80;
                        if (last == 0 && prev_sign == 0) || (last == 0xff && prev_sign != 0) {
                            self.stats.long1_padded += 1;
                        }
                    }
                    self.stack.push(Value::Int(i64::from_le_bytes(a)));
                    pos += 2 + n;
                }
                0x8c if pos + 1 < data.len() && pos + 2 + data[pos + 1] as usize <= data.len() => {
                    let n = data[pos + 1] as usize;
                    let v = match self.span(pos + 2, n) {
                        Some(v) => v,
                        None => {
                            let s = self.utf8(&data[pos + 2..pos + 2 + n], pos)?;
                            self.heap.new_str(s)
                        }
                    };
                    self.stack.push(v);
                    pos += 2 + n;
                }
                b'}' => {
                    // A trace entry as CPython writes it: decode it straight into a record.
                    if data.get(pos + 1) == Some(&0x94)
                        && data.get(pos + 2) == Some(&b'(')
                        && let Some(end) = self.event_dict(pos + 3, absorb)
                    {
                        self.stats.memoize_ops += 1;
                        // When the list it goes into is already a trace, append it now
                        // (after anything still waiting in the batch, so order is kept);
                        // otherwise queue it for the APPENDS.
                        let direct = self.direct_target(absorb, pos)?;
                        match direct {
                            Some(t) => {
                                absorb.append_event(&mut self.heap, t, &self.event, pos as u64)?;
                                self.stack.push(Value::Appended);
                            }
                            None => {
                                self.heap.pending.push(self.event);
                                self.stack
                                    .push(Value::Event((self.heap.pending.len() - 1) as u32));
                            }
                        }
                        pos = end;
                        continue;
                    }
                    let v = self.heap.new_dict(Vec::new());
                    self.stack.push(v);
                    pos += 1;
                }
                b']' => {
                    // The shape of nearly every list in a snapshot: a frames list of memo
                    // references to frames already interned. Decode it in one pass; the
                    // list then exists only as its interned stack.
                    if data.get(pos + 1) == Some(&0x94)
                        && data.get(pos + 2) == Some(&b'(')
                        && let Some((end, id)) = self.frames_list(pos + 3, absorb)
                    {
                        self.stats.memoize_ops += 1;
                        self.stack.push(Value::Stack(id));
                        self.heap.memo.push(Value::Stack(id));
                        pos = end;
                        continue;
                    }
                    let v = self.heap.new_list(Vec::new());
                    self.stack.push(v);
                    pos += 1;
                }
                _ => {
                    self.pos = pos;
                    if let Some(top) = self.step(op, absorb)? {
                        return Ok(top);
                    }
                    pos = self.pos;
                    data = self.data;
                }
            }
        }
    }

    /// Reads a frames-list body (`BINGET`/`LONG_BINGET`s of interned frames, then
    /// `APPENDS`) starting at `p` and interns it; returns the offset after `APPENDS` and
    /// the stack, or `None` (nothing consumed) when the body holds anything else.
    #[inline]
    fn frames_list<A: Absorb<'a>>(
        &mut self,
        p: usize,
        absorb: &mut A,
    ) -> Option<(usize, crate::model::StackId)> {
        let data = self.data;
        // Find the body's end without touching the memo.
        let q = super::bodies::body_end(data, p)?;
        let key = match self.list_bodies.get(&data[p..q]) {
            Ok(id) => return Some((q + 1, id)),
            Err(k) => k,
        };
        self.frame_scratch.clear();
        let mut r = p;
        while r < q {
            match self.heap.memo.get(memo_ref(data, &mut r)?)? {
                Value::Frame(f) => self.frame_scratch.push(f),
                _ => return None,
            }
        }
        let id = absorb.intern_stack(&self.frame_scratch);
        self.list_bodies.insert(key, id);
        Some((q + 1, id))
    }

    /// Decodes a trace-entry dict body (`key value ... SETITEMS`) starting at `p`, the dict
    /// itself already counted as memoized. Keys must be memoized strings, values the plain
    /// kinds trace entries hold; anything else undoes what was done (memo entries, strings,
    /// lists) and returns `None`, so the general path decodes the same bytes again.
    ///
    /// Never inlined: inside `run` its loop shared one register allocation with every
    /// opcode arm, and unrelated changes elsewhere in the crate (a cache moved from the
    /// builder into the stack interner) made that allocation spill the input position to
    /// the stack, costing 4-5% of the parse. On its own it is as fast as the best inlined
    /// build and stays so across such changes (measured with both arrangements).
    #[inline(never)]
    fn event_dict<A: Absorb<'a>>(&mut self, mut p: usize, absorb: &mut A) -> Option<usize> {
        let data = self.data;
        let (memo_len, strs_len, lists_len) = (
            self.heap.memo.len(),
            self.heap.strs.len(),
            self.heap.lists.len(),
        );
        self.heap.memo.push(Value::Gone); // the dict's own MEMOIZE
        // Filled in place: the record is large, and copying it per event showed up.
        self.event = PendingEvent::default();
        let mut seen_user_metadata = false;
        let ok = loop {
            if data.get(p) == Some(&b'u') {
                break self.event.action.is_some();
            }
            let Some(key) = memo_ref(data, &mut p) else {
                break false;
            };
            // A key seen before needs no memo read: `key_fields` only holds string slots,
            // and is cleared when a slot is overwritten or dropped.
            let field = match self.key_fields.get(key) {
                Some(&f) if f != super::fields::UNSET => f,
                _ => {
                    let Some(k) = self.heap.memo.get(key).filter(|k| k.is_str()) else {
                        break false;
                    };
                    let f = absorb.field_of(&self.heap, k);
                    if self.key_fields.len() <= key {
                        self.key_fields.resize(key + 1, super::fields::UNSET);
                    }
                    self.key_fields[key] = f;
                    f
                }
            };
            let done = match field {
                super::fields::ACTION
                | super::fields::COMPILE_CONTEXT
                | super::fields::USER_METADATA => match self.fast_str(&mut p) {
                    Some(v) => {
                        match field {
                            super::fields::ACTION => self.event.action = Some(v),
                            super::fields::COMPILE_CONTEXT => self.event.compile_context = Some(v),
                            _ => {
                                seen_user_metadata = true;
                                self.event.user_metadata = Some(v)
                            }
                        }
                        true
                    }
                    None => false,
                },
                super::fields::ADDR
                | super::fields::DEVICE_FREE
                | super::fields::SIZE
                | super::fields::STREAM
                | super::fields::TIME => match fast_int(data, &mut p) {
                    Some(v) => {
                        let v = Some(v as i128);
                        match field {
                            super::fields::ADDR => self.event.addr = v,
                            super::fields::DEVICE_FREE => self.event.device_free = v,
                            super::fields::SIZE => self.event.size = v,
                            super::fields::STREAM => self.event.stream = v,
                            _ => {
                                self.event.time_us = v;
                                self.event.time_after_user_metadata = seen_user_metadata;
                            }
                        }
                        true
                    }
                    None => false,
                },
                super::fields::FRAMES => match self.fast_frames(&mut p, absorb) {
                    Some(s) => {
                        self.event.stack = Some(s);
                        true
                    }
                    None => false,
                },
                _ => false,
            };
            if !done {
                break false;
            }
        };
        if ok {
            Some(p + 1)
        } else {
            self.heap.memo.truncate(memo_len);
            self.key_fields.truncate(memo_len);
            self.heap.strs.truncate(strs_len);
            self.heap.lists.truncate(lists_len);
            None
        }
    }

    /// A [`Value::Span`] for the `len` bytes at `off`, if they are UTF-8 and fit the packing.
    #[inline]
    fn span(&self, off: usize, len: usize) -> Option<Value> {
        let b = self.data.get(off..off + len)?;
        if len > 0xffff || off >= 1 << 48 {
            return None;
        }
        if !b.is_ascii() {
            std::str::from_utf8(b).ok()?;
        }
        Some(Value::Span(((off as u64) << 16) | len as u64))
    }

    /// A string value: a memo reference to a string, or a short string (memoized or not).
    #[inline]
    fn fast_str(&mut self, p: &mut usize) -> Option<Value> {
        let data = self.data;
        let v = match *data.get(*p)? {
            b'h' | b'j' => self.heap.memo.get(memo_ref(data, p)?)?,
            0x8c => {
                let n = *data.get(*p + 1)? as usize;
                let v = self.span(*p + 2, n)?;
                *p += 2 + n;
                if data.get(*p) == Some(&0x94) {
                    self.heap.memo.push(v);
                    *p += 1;
                }
                v
            }
            _ => return None,
        };
        v.is_str().then_some(v)
    }

    /// A `frames` value: a memo reference to an interned (or empty) list, or a new list of
    /// interned frames, or a new empty list.
    #[inline]
    fn fast_frames<A: Absorb<'a>>(
        &mut self,
        p: &mut usize,
        absorb: &mut A,
    ) -> Option<crate::model::StackId> {
        let data = self.data;
        let list = match *data.get(*p)? {
            b'h' | b'j' => self.heap.memo.get(memo_ref(data, p)?)?,
            b']' if data.get(*p + 1) == Some(&0x94) => {
                if data.get(*p + 2) == Some(&b'(') {
                    let (end, id) = self.frames_list(*p + 3, absorb)?;
                    self.heap.memo.push(Value::Stack(id));
                    *p = end;
                    return Some(id);
                }
                // An empty list stays a real list: other entries may share it.
                let v = self.heap.new_list(Vec::new());
                self.heap.memo.push(v);
                *p += 2;
                return Some(crate::model::StackId::EMPTY);
            }
            _ => return None,
        };
        match list {
            Value::Stack(s) => Some(s),
            Value::List(l) => match &self.heap.lists[l as usize] {
                ListSlot::Stack(s) => Some(*s),
                ListSlot::Items(items) if items.is_empty() => Some(crate::model::StackId::EMPTY),
                _ => None,
            },
            _ => None,
        }
    }

    /// Decodes one opcode at `self.pos` (any opcode; `run` handles the common ones
    /// itself). Returns the result at STOP.
    fn step<A: Absorb<'a>>(&mut self, op: u8, absorb: &mut A) -> R<Option<Value>> {
        let at = self.pos;
        self.pos += 1;
        {
            {
                match op {
                    // --- framing and protocol ---
                    0x80 => {
                        let p = self.u8("the PROTO version")?;
                        if p > 5 {
                            return Err(
                                self.malformed(at, format!("unsupported pickle protocol {p}"))
                            );
                        }
                        self.stats.protocol = Some(p);
                    }
                    0x95 => {
                        self.u64le("a FRAME length")?;
                    }
                    b'.' => {
                        self.stats.end = self.pos as u64;
                        if !self.marks.is_empty() {
                            return Err(self.malformed(at, "STOP inside an open MARK"));
                        }
                        self.check_memory(absorb, self.pos)?;
                        return match self.stack.len() {
                            1 => Ok(Some(self.stack[0])),
                            0 => Err(self.malformed(at, "STOP with an empty stack")),
                            n => {
                                Err(self
                                    .malformed(at, format!("STOP with {n} values on the stack")))
                            }
                        };
                    }
                    // --- stack manipulation ---
                    b'(' => {
                        if self.marks.len() >= MAX_MARKS {
                            return Err(
                                self.malformed(at, format!("more than {MAX_MARKS} nested MARKs"))
                            );
                        }
                        self.marks.push(self.stack.len());
                    }
                    b'0' => {
                        self.pop(at)?;
                    }
                    b'1' => {
                        let m = self.pop_mark(at)?;
                        self.stack.truncate(m);
                    }
                    b'2' => {
                        let v = *self.top_mut(at)?;
                        self.stack.push(v);
                    }
                    // --- constants and numbers ---
                    b'N' => self.stack.push(Value::None),
                    0x88 => self.stack.push(Value::True),
                    0x89 => self.stack.push(Value::False),
                    b'K' => {
                        let v = self.u8("a BININT1 value")?;
                        self.stack.push(Value::Int(v as i64));
                    }
                    b'M' => {
                        let b = self.take(2, "a BININT2 value")?;
                        self.stack
                            .push(Value::Int(u16::from_le_bytes([b[0], b[1]]) as i64));
                    }
                    b'J' => {
                        let v = self.u32le("a BININT value")? as i32;
                        self.stack.push(Value::Int(v as i64));
                    }
                    0x8a | 0x8b => {
                        let n = if op == 0x8a {
                            self.u8("a LONG1 length")? as usize
                        } else {
                            // Signed, as CPython reads it.
                            let n = self.u32le("a LONG4 length")? as i32;
                            usize::try_from(n).map_err(|_| {
                                self.malformed(at, format!("LONG4 with a negative length ({n})"))
                            })?
                        };
                        let b = self.take(n, "the bytes of a long integer")?;
                        if n > 16 {
                            return Err(self.malformed(
                                at,
                                format!("integer of {n} bytes is too large for a snapshot field"),
                            ));
                        }
                        let mut v: i128 = 0;
                        for (i, &byte) in b.iter().enumerate() {
                            v |= (byte as i128) << (8 * i);
                        }
                        if n > 0 && n < 16 && b[n - 1] & 0x80 != 0 {
                            v -= 1i128 << (8 * n); // two's complement sign
                        }
                        // Minimal length is what CPython writes; the C++ pickler always writes 8.
                        if n >= 2 {
                            let last = b[n - 1];
                            let prev_sign = b[n - 2] & 0x80;
                            if (last == 0 && prev_sign == 0) || (last == 0xff && prev_sign != 0) {
                                self.stats.long1_padded += 1;
                            }
                        }
                        self.push_int(v);
                    }
                    b'G' => {
                        let b = self.take(8, "a BINFLOAT value")?;
                        let mut a = [0u8; 8];
                        a.copy_from_slice(b);
                        self.stack.push(Value::Float(f64::from_be_bytes(a)));
                    }
                    b'I' => {
                        let l = self.line("an INT line")?;
                        match l {
                            b"01" => self.stack.push(Value::True),
                            b"00" => self.stack.push(Value::False),
                            _ => {
                                let v = text_number::<i128>(l).ok_or_else(|| {
                                    self.malformed(at, "INT is not a decimal integer")
                                })?;
                                self.push_int(v);
                            }
                        }
                    }
                    b'L' => {
                        let l = self.line("a LONG line")?;
                        let v = text_number::<i128>(l).ok_or_else(|| {
                            self.malformed(at, "LONG is not a decimal integer that fits 128 bits")
                        })?;
                        self.push_int(v);
                    }
                    b'F' => {
                        let l = self.line("a FLOAT line")?;
                        let v = text_number::<f64>(l)
                            .ok_or_else(|| self.malformed(at, "FLOAT is not a number"))?;
                        self.stack.push(Value::Float(v));
                    }
                    // --- strings and bytes ---
                    0x8c | b'X' | 0x8d => {
                        let n = match op {
                            0x8c => self.u8("a SHORT_BINUNICODE length")? as u64,
                            b'X' => self.u32le("a BINUNICODE length")? as u64,
                            _ => self.u64le("a BINUNICODE8 length")?,
                        };
                        let n = usize::try_from(n).unwrap_or(usize::MAX);
                        let b = self.take(n, "the bytes of a string")?;
                        let s = self.utf8(b, at)?;
                        let v = self.heap.new_str(s);
                        self.stack.push(v);
                    }
                    b'V' => {
                        let l = self.line("a UNICODE line")?;
                        let s = decode_raw_unicode_escape(l)
                            .ok_or_else(|| self.malformed(at, "bad UNICODE escape"))?;
                        let v = self.heap.new_str(s);
                        self.stack.push(v);
                    }
                    b'S' => {
                        let l = self.line("a STRING line")?;
                        let s = decode_py_string_literal(l)
                            .ok_or_else(|| self.malformed(at, "bad STRING literal"))?;
                        let v = self.heap.new_str(Cow::Owned(s));
                        self.stack.push(v);
                    }
                    b'T' | b'U' => {
                        // Python 2 byte strings; decoded as Latin-1 like pickle's default ASCII-ish handling.
                        let n = if op == b'U' {
                            self.u8("a SHORT_BINSTRING length")? as usize
                        } else {
                            // Signed, as CPython reads it.
                            let n = self.u32le("a BINSTRING length")? as i32;
                            usize::try_from(n).map_err(|_| {
                                self.malformed(
                                    at,
                                    format!("BINSTRING with a negative length ({n})"),
                                )
                            })?
                        };
                        let b = self.take(n, "the bytes of a string")?;
                        let v = match std::str::from_utf8(b) {
                            Ok(s) => self.heap.new_str(Cow::Borrowed(s)),
                            Err(_) => self
                                .heap
                                .new_str(Cow::Owned(b.iter().map(|&c| c as char).collect())),
                        };
                        self.stack.push(v);
                    }
                    b'C' | b'B' | 0x8e | 0x96 => {
                        let n = match op {
                            b'C' => self.u8("a SHORT_BINBYTES length")? as u64,
                            b'B' => self.u32le("a BINBYTES length")? as u64,
                            _ => self.u64le("a BINBYTES8 length")?,
                        };
                        let n = usize::try_from(n).unwrap_or(usize::MAX);
                        let b = self.take(n, "the bytes of a bytes object")?;
                        let v = self.heap.new_bytes(b);
                        self.stack.push(v);
                    }
                    // --- containers ---
                    b']' => {
                        let v = self.heap.new_list(Vec::new());
                        self.stack.push(v);
                    }
                    b'}' => {
                        let v = self.heap.new_dict(Vec::new());
                        self.stack.push(v);
                    }
                    b')' => {
                        let v = self.heap.new_tuple(&[]);
                        self.stack.push(v);
                    }
                    b'l' => {
                        let m = self.pop_mark(at)?;
                        let list = self.heap.new_list(Vec::new());
                        // Route through the hook so lists of trace entries still become records.
                        self.stack.insert(m, list);
                        self.append_items(list, m + 1, absorb, at)?;
                    }
                    b'd' => {
                        let m = self.pop_mark(at)?;
                        let dict = self.heap.new_dict(Vec::new());
                        self.stack.insert(m, dict);
                        self.set_items(dict, m + 1, at)?;
                    }
                    b't' => {
                        let m = self.pop_mark(at)?;
                        let v = self.heap.new_tuple(&self.stack[m..]);
                        self.stack.truncate(m);
                        self.stack.push(v);
                    }
                    0x85..=0x87 => {
                        let n = (op - 0x84) as usize;
                        let floor = self.marks.last().copied().unwrap_or(0);
                        if self.stack.len() < floor + n {
                            return Err(self.malformed(at, "stack underflow in TUPLEn"));
                        }
                        let from = self.stack.len() - n;
                        let v = self.heap.new_tuple(&self.stack[from..]);
                        self.stack.truncate(from);
                        self.stack.push(v);
                    }
                    b'a' => {
                        let item = self.pop(at)?;
                        let list = *self.top_mut(at)?;
                        self.stack.push(item);
                        let from = self.stack.len() - 1;
                        self.append_items(list, from, absorb, at)?;
                    }
                    b'e' => {
                        let m = self.pop_mark(at)?;
                        if m == 0 {
                            return Err(self.malformed(at, "APPENDS with no list below the MARK"));
                        }
                        let list = self.stack[m - 1];
                        self.append_items(list, m, absorb, at)?;
                    }
                    b's' => {
                        let floor = self.marks.last().copied().unwrap_or(0);
                        if self.stack.len() < floor + 3 {
                            return Err(self.malformed(at, "stack underflow in SETITEM"));
                        }
                        let from = self.stack.len() - 2;
                        let dict = self.stack[from - 1];
                        self.set_items(dict, from, at)?;
                    }
                    b'u' => {
                        let m = self.pop_mark(at)?;
                        if m == 0 {
                            return Err(self.malformed(at, "SETITEMS with no dict below the MARK"));
                        }
                        let dict = self.stack[m - 1];
                        self.set_items(dict, m, at)?;
                    }
                    // --- memo ---
                    0x94 => {
                        self.stats.memoize_ops += 1;
                        let idx = self.heap.memo.len();
                        self.memo_put(idx, at)?;
                    }
                    b'q' => {
                        self.stats.put_ops += 1;
                        let i = self.u8("a BINPUT index")? as usize;
                        self.memo_put(i, at)?;
                    }
                    b'r' => {
                        self.stats.put_ops += 1;
                        let i = self.u32le("a LONG_BINPUT index")? as usize;
                        self.memo_put(i, at)?;
                    }
                    b'p' => {
                        self.stats.put_ops += 1;
                        let l = self.line("a PUT index")?;
                        let i = text_number::<usize>(l)
                            .ok_or_else(|| self.malformed(at, "PUT index is not a number"))?;
                        self.memo_put(i, at)?;
                    }
                    b'h' => {
                        let i = self.u8("a BINGET index")? as usize;
                        self.memo_get(i, at)?;
                    }
                    b'j' => {
                        let i = self.u32le("a LONG_BINGET index")? as usize;
                        self.memo_get(i, at)?;
                    }
                    b'g' => {
                        let l = self.line("a GET index")?;
                        let i = text_number::<usize>(l)
                            .ok_or_else(|| self.malformed(at, "GET index is not a number"))?;
                        self.memo_get(i, at)?;
                    }
                    other => {
                        return Err(match opcode_name(other) {
                        Some(name) => LoadErrorKind::Forbidden {
                            name,
                            offset: at as u64,
                        },
                        None if matches!(other, 0x8f..=0x91) => self.malformed(
                            at,
                            "sets (EMPTY_SET/ADDITEMS/FROZENSET) never occur in a memory snapshot",
                        ),
                        None => LoadErrorKind::BadOpcode {
                            opcode: other,
                            offset: at as u64,
                        },
                    });
                    }
                }
            }
        }
        Ok(None)
    }
}

/// `b` decoded with each UTF-8-encoded surrogate (`ED A0..BF 80..BF`, which CPython's
/// `surrogatepass` writes for a lone surrogate) replaced by U+FFFD; `first_bad` is where
/// plain UTF-8 decoding failed. `Err` holds the offset of a byte that is no surrogate.
fn replace_surrogates(b: &[u8], first_bad: usize) -> Result<String, usize> {
    let mut out = String::with_capacity(b.len());
    let mut at = 0;
    let mut bad = first_bad;
    loop {
        // SAFETY: `b[at..bad]` is what `from_utf8` (or the check before) accepted.
        out.push_str(unsafe { std::str::from_utf8_unchecked(&b[at..bad]) });
        if bad == b.len() {
            return Ok(out);
        }
        match b.get(bad..bad + 3) {
            Some([0xED, 0xA0..=0xBF, 0x80..=0xBF]) => out.push('\u{FFFD}'),
            _ => return Err(bad),
        }
        at = bad + 3;
        bad = match std::str::from_utf8(&b[at..]) {
            Ok(_) => b.len(),
            Err(e) => at + e.valid_up_to(),
        };
    }
}

/// The memo index of a `BINGET`/`LONG_BINGET` at `*p`, moving past it.
#[inline]
fn memo_ref(data: &[u8], p: &mut usize) -> Option<usize> {
    match *data.get(*p)? {
        b'h' => {
            let i = *data.get(*p + 1)? as usize;
            *p += 2;
            Some(i)
        }
        b'j' => {
            let b = data.get(*p + 1..*p + 5)?;
            *p += 5;
            Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        }
        _ => None,
    }
}

/// A small int value (BININT1, BININT2, BININT, or LONG1 of at most 8 bytes).
#[inline]
fn fast_int(data: &[u8], p: &mut usize) -> Option<i64> {
    let v = match *data.get(*p)? {
        b'K' => {
            let v = *data.get(*p + 1)? as i64;
            *p += 2;
            v
        }
        b'M' => {
            let b = data.get(*p + 1..*p + 3)?;
            *p += 3;
            u16::from_le_bytes([b[0], b[1]]) as i64
        }
        b'J' => {
            let b = data.get(*p + 1..*p + 5)?;
            *p += 5;
            i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64
        }
        0x8a => {
            let n = *data.get(*p + 1)? as usize;
            if n == 0 || n > 8 {
                return None;
            }
            let b = data.get(*p + 2..*p + 2 + n)?;
            *p += 2 + n;
            long1_i64(b, data.get(*p - n..*p - n + 8))
        }
        _ => return None,
    };
    Some(v)
}

/// A LONG1 body of 1 to 8 bytes as an `i64`. With 8 readable bytes at the same place
/// (`word`) it is one load, a shift up and an arithmetic shift down: copying the bytes into
/// an array first made the following 8-byte load wait on partial stores (a quarter of the
/// parse, measured).
#[inline]
fn long1_i64(b: &[u8], word: Option<&[u8]>) -> i64 {
    let n = b.len();
    match word {
        Some(w) if w.len() == 8 && (1..=8).contains(&n) => {
            let raw = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            let shift = 64 - 8 * n as u32;
            ((raw << shift) as i64) >> shift
        }
        _ => {
            let fill: u64 = if b.last().is_some_and(|x| x & 0x80 != 0) {
                !0
            } else {
                0
            };
            let mut v = fill;
            for (i, &x) in b.iter().enumerate() {
                v &= !(0xff << (8 * i));
                v |= (x as u64) << (8 * i);
            }
            v as i64
        }
    }
}

/// A protocol-0 text number (INT, LONG with its trailing `L`, FLOAT, memo indices).
fn text_number<T: std::str::FromStr>(l: &[u8]) -> Option<T> {
    std::str::from_utf8(l)
        .ok()?
        .trim()
        .trim_end_matches('L')
        .parse()
        .ok()
}

/// Protocol 0 `UNICODE`: raw-unicode-escape (only `\uXXXX` and `\UXXXXXXXX` are escapes).
fn decode_raw_unicode_escape(l: &[u8]) -> Option<Cow<'_, str>> {
    if !l.contains(&b'\\') {
        // Raw-unicode-escape text without escapes is Latin-1.
        return Some(match std::str::from_utf8(l) {
            Ok(s) if s.is_ascii() => Cow::Borrowed(s),
            _ => Cow::Owned(l.iter().map(|&c| c as char).collect()),
        });
    }
    let mut out = String::with_capacity(l.len());
    let mut i = 0;
    while i < l.len() {
        if l[i] == b'\\' && i + 1 < l.len() && (l[i + 1] == b'u' || l[i + 1] == b'U') {
            let n = if l[i + 1] == b'u' { 4 } else { 8 };
            let hex = l.get(i + 2..i + 2 + n)?;
            let code = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            // A lone surrogate (CPython escapes one so) reads as U+FFFD, as in BINUNICODE.
            let c = match code {
                0xD800..=0xDFFF => '\u{FFFD}',
                _ => char::from_u32(code)?,
            };
            out.push(c);
            i += 2 + n;
        } else {
            out.push(l[i] as char);
            i += 1;
        }
    }
    Some(Cow::Owned(out))
}

/// Protocol 0 `STRING`: a quoted Python 2 literal with backslash escapes.
fn decode_py_string_literal(l: &[u8]) -> Option<String> {
    let q = *l.first()?;
    if !(q == b'\'' || q == b'"') || l.len() < 2 || *l.last()? != q {
        return None;
    }
    let body = &l[1..l.len() - 1];
    let mut out = String::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if c != b'\\' {
            out.push(c as char);
            i += 1;
            continue;
        }
        let e = *body.get(i + 1)?;
        i += 2;
        match e {
            b'n' => out.push('\n'),
            b't' => out.push('\t'),
            b'r' => out.push('\r'),
            b'\\' => out.push('\\'),
            b'\'' => out.push('\''),
            b'"' => out.push('"'),
            b'x' => {
                let hex = body.get(i..i + 2)?;
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()? as char);
                i += 2;
            }
            other => {
                out.push('\\');
                out.push(other as char);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::long1_i64;

    /// Two's-complement little-endian, as `pickle.encode_long` writes LONG1 bodies.
    fn encode(v: i64, n: usize) -> Vec<u8> {
        v.to_le_bytes()[..n].to_vec()
    }

    #[test]
    fn long1_word_and_byte_paths_agree() {
        let values = [
            0i64,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            255,
            256,
            1 << 40,
            -(1 << 40),
        ]
        .into_iter()
        .chain([i64::MAX, i64::MIN, 0x7fff_ffff_ffff, -0x8000_0000_0000]);
        for v in values {
            // The shortest width that holds v, and every wider one.
            let min = (1..=8)
                .find(|&n| {
                    let s = 64 - 8 * n as u32;
                    ((v << s) >> s) == v
                })
                .unwrap();
            for n in min..=8 {
                let body = encode(v, n);
                let mut padded = body.clone();
                padded.extend_from_slice(&[0xAA; 8]); // bytes after the body are ignored
                assert_eq!(long1_i64(&body, None), v, "byte path, {v} in {n} bytes");
                assert_eq!(
                    long1_i64(&padded[..n], Some(&padded[..8])),
                    v,
                    "word path, {v} in {n} bytes"
                );
            }
        }
    }
}
