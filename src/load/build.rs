//! Turns the values a pickle (or JSON) decodes into the [`Snapshot`] model.
//!
//! Trace entries are converted the moment they are appended to their list (see
//! [`Absorb`]), frames and stacks are interned by identity (their heap slot) and then by
//! content. Everything else (segments, annotations, settings) is small and converted at
//! the end.

use super::fields;
use super::pickle::{Absorb, Absorbed, DictSlot, Heap, ListSlot, PendingEvent, Value as H};
use super::prefault::Region;
use super::scan_ahead::ScanAhead;
use super::stacks::StackInterner;
use crate::error::LoadErrorKind;
use crate::model::Line;
use crate::model::fxhash::FastMap;
use crate::model::{
    Action, Annotation, Block, BlockState, EventMeta, Extra, Frame, FrameId, HistoryEntry, Layout,
    MetaId, Segment, Snapshot, StackId, Trace, TraceScan, Value, flags,
};

type R<T> = Result<T, LoadErrorKind>;

/// Deepest nesting converted into owned values; snapshots need about 6.
const MAX_DEPTH: usize = 200;
/// Owned-value nodes one frame expands to (a map of name, filename and line: the map,
/// three keys, three values, with room for an extra key).
const FRAME_NODES: usize = 9;
/// Bytes one owned value takes besides its text.
const NODE_BYTES: usize = size_of::<Value>();
/// Bytes one trace event takes in the model's columns.
const EVENT_BYTES: usize = 33;

fn schema(place: impl Into<String>, message: impl Into<String>) -> LoadErrorKind {
    LoadErrorKind::Schema {
        place: place.into(),
        message: message.into(),
    }
}

fn type_name(v: H) -> &'static str {
    match v {
        H::None => "None",
        H::True | H::False => "a bool",
        H::Int(_) | H::Big(_) => "an int",
        H::Float(_) => "a float",
        H::Str(_) | H::Span(_) => "a string",
        H::Bytes(_) => "bytes",
        H::List(_) => "a list",
        H::Dict(_) => "a dict",
        H::Tuple(_) => "a tuple",
        H::Frame(_) => "a frame",
        H::Stack(_) => "a frames list",
        H::Event(_) | H::Appended => "a trace entry",
        H::Gone => "a consumed entry",
    }
}

fn int_of(heap: &Heap, v: H) -> Option<i128> {
    match v {
        H::Int(i) => Some(i as i128),
        H::Big(b) => heap.bigs.get(b as usize).copied(),
        _ => None,
    }
}

type RawEvent = PendingEvent;

/// Fewest bytes a pickled trace entry takes (a dict of memoized keys and small values).
const MIN_EVENT_BYTES: u64 = 48;

/// Builds a [`Snapshot`]; implements the machine's append hook.
pub(crate) struct Builder {
    pub snap: Snapshot,
    /// Stacks are interned on a worker thread; ids handed out while parsing are tickets.
    stacks: StackInterner,
    traces: Vec<Option<Trace>>,
    meta_index: FastMap<EventMeta, MetaId>,
    last_meta: Option<MetaId>,
    /// Raw attributes (flags, stream, short strings) of recent events and their metas,
    /// most recent first: events cycle through a few streams, so one key missed often.
    recent_raw_metas: [(RawMetaKey, MetaId); 8],
    recent_raw_len: usize,
    field_cache: Vec<u8>,
    /// Alloc/free entries without an address, and where the first one was.
    addrless: u64,
    first_addrless: Option<String>,
    action_cache: FastMap<u64, u8>,
    recent_actions: [(u64, u8); 8],
    frame_scratch: Vec<FrameId>,
    /// Bytes of the model counted as it is built (events, metas, owned values, segments,
    /// blocks), for the memory bound; the interned tables report their own.
    counted: usize,
    /// Bytes this side may take before the machine checks the bound again, and the input
    /// read when it said so (see [`Absorb::set_room`]).
    room: usize,
    read: usize,
    /// Bytes charged since the room was set.
    spent: usize,
    input_len: usize,
    /// Long traces lent to a worker for their [`TraceScan`] once the next trace begins.
    scan_ahead: ScanAhead,
    /// Whether helper threads may be used.
    threaded: bool,
}

impl Builder {
    pub fn new(input_len: usize, threaded: bool) -> Self {
        Builder {
            snap: Snapshot::default(),
            stacks: StackInterner::new(threaded),
            traces: Vec::new(),
            meta_index: FastMap::default(),
            last_meta: None,
            recent_raw_metas: [((0, 0, (0, 0), (0, 0)), MetaId(0)); 8],
            recent_raw_len: 0,
            addrless: 0,
            first_addrless: None,
            field_cache: Vec::new(),
            action_cache: FastMap::default(),
            recent_actions: [(u64::MAX, 0); 8],
            frame_scratch: Vec::new(),
            counted: 0,
            room: super::bound::allowed(input_len),
            read: input_len,
            spent: 0,
            input_len,
            scan_ahead: ScanAhead::new(threaded),
            threaded,
        }
    }

    fn is_trace_entry(heap: &Heap, v: H) -> bool {
        if let H::Event(_) = v {
            return true;
        }
        let H::Dict(d) = v else { return false };
        match heap.dict_items(d) {
            Some(items) => items.iter().any(|(k, _)| heap.as_str(*k) == Some("action")),
            None => false,
        }
    }

    // ---------- frames and stacks ----------

    fn frame_of(&mut self, heap: &mut Heap, v: H, place: &dyn Fn() -> String) -> R<FrameId> {
        let d = match v {
            H::Frame(f) => return Ok(f),
            H::Dict(d) => d,
            _ => {
                return Err(schema(
                    place(),
                    format!("a frame must be a dict, found {}", type_name(v)),
                ));
            }
        };
        let items = match &heap.dicts[d as usize] {
            DictSlot::Frame(f) => return Ok(*f),
            DictSlot::Items { items, .. } => items.clone(),
            DictSlot::Free(_) => return Err(schema(place(), "frame refers to a consumed value")),
        };
        let mut name = None;
        let mut filename = None;
        let mut line = Line::default();
        let mut extra = Extra::new();
        for (k, val) in items {
            match heap.as_str(k) {
                Some("name") => name = heap.string(val).or(Some(String::new())),
                Some("filename") => filename = heap.string(val).or(Some(String::new())),
                Some("line") => {
                    line = match int_of(heap, val) {
                        Some(i) => Line::new(i).ok_or_else(|| {
                            schema(
                                place(),
                                format!("frame line {i} is beyond the 64-bit range"),
                            )
                        })?,
                        None => {
                            let found = match val {
                                H::Float(f) if f.abs() >= 9.3e18 => {
                                    format!("the number {f}, too large for a line number")
                                }
                                H::Float(f) => format!("the float {f}"),
                                other => type_name(other).to_string(),
                            };
                            return Err(schema(
                                place(),
                                format!("frame line must be an int, found {found}"),
                            ));
                        }
                    }
                }
                Some(_) => {
                    let other = heap.string(k).unwrap_or_default();
                    let ov = self.owned(heap, val, 0)?;
                    extra.push((other, ov));
                }
                None => {
                    let kv = self.owned(heap, k, 0)?;
                    let ov = self.owned(heap, val, 0)?;
                    extra.push((kv.key_string(), ov));
                }
            }
        }
        let frame = Frame {
            name: self.snap.strings.intern_owned(name.unwrap_or_default()),
            filename: self.snap.strings.intern_owned(filename.unwrap_or_default()),
            line,
            extra,
        };
        let id = self.snap.frames.intern(frame);
        heap.set_dict_frame(d, id);
        Ok(id)
    }

    /// Interns the stack behind a `frames` value.
    fn stack_of(&mut self, heap: &mut Heap, v: H, place: &dyn Fn() -> String) -> R<StackId> {
        let items: Vec<H> = match v {
            H::Stack(s) => return Ok(s),
            H::List(l) => match &heap.lists[l as usize] {
                ListSlot::Stack(s) => return Ok(*s),
                ListSlot::Items(items) => items.clone(),
                ListSlot::Events(_) => return Err(schema(place(), "frames holds trace entries")),
            },
            H::Tuple(t) => heap.tuple(t).to_vec(),
            other => {
                return Err(schema(
                    place(),
                    format!("frames must be a list, found {}", type_name(other)),
                ));
            }
        };
        let mut ids = std::mem::take(&mut self.frame_scratch);
        ids.clear();
        for &item in &items {
            ids.push(self.frame_of(heap, item, place)?);
        }
        let id = self.stacks.intern(&ids);
        self.frame_scratch = ids;
        heap.forget_frames(&items);
        if let H::List(l) = v {
            heap.lists[l as usize] = ListSlot::Stack(id);
        }
        Ok(id)
    }

    // ---------- trace entries ----------

    /// Interns the shared attributes of an event. Consecutive events nearly always share
    /// them, so the last id is checked first without allocating.
    fn meta_id(
        &mut self,
        fl: u16,
        stream: i64,
        cc: Option<&str>,
        um: Option<&str>,
        pool_id: Option<Value>,
        extra: Extra,
    ) -> MetaId {
        if let Some(last) = self.last_meta {
            let m = &self.snap.metas[last.index()];
            if m.flags == fl
                && m.stream == stream
                && m.compile_context.as_deref() == cc
                && m.user_metadata.as_deref() == um
                && m.pool_id == pool_id
                && m.extra == extra
            {
                return last;
            }
        }
        let meta = EventMeta {
            flags: fl,
            stream,
            compile_context: cc.map(str::to_owned),
            user_metadata: um.map(str::to_owned),
            pool_id,
            extra,
        };
        let id = match self.meta_index.get(&meta) {
            Some(&id) => id,
            None => {
                let id = MetaId(self.snap.metas.len() as u32);
                // Kept twice (the list and its index), strings included.
                let text = meta.compile_context.as_ref().map_or(0, String::len)
                    + meta.user_metadata.as_ref().map_or(0, String::len);
                self.counted += 2 * (size_of::<EventMeta>() + 16 + text);
                self.snap.metas.push(meta.clone());
                self.meta_index.insert(meta, id);
                id
            }
        };
        self.last_meta = Some(id);
        id
    }

    /// The field a key string names. Keys are memoized strings, so each distinct key
    /// index is classified once and then looked up.
    #[inline]
    fn field_of(&mut self, heap: &Heap, k: H) -> u8 {
        let i = match k {
            H::Str(i) => i,
            H::Span(_) => return heap.as_str(k).map_or(fields::OTHER, fields::classify),
            _ => return fields::OTHER,
        };
        let i = i as usize;
        if let Some(&f) = self.field_cache.get(i)
            && f != fields::UNSET
        {
            return f;
        }
        if self.field_cache.len() <= i {
            self.field_cache
                .resize(heap.strs.len().max(i + 1), fields::UNSET);
        }
        let f = fields::classify(heap.str(i as u32));
        self.field_cache[i] = f;
        f
    }

    /// Lends trace `t` to the scan worker (when it is long enough).
    fn lend(&mut self, t: usize) {
        let metas = &self.snap.metas;
        self.scan_ahead
            .lend(t, &mut self.traces[t], || TraceScan::timed(metas));
    }

    /// Takes trace `t` back from the scan worker if it is lent (an event for it came
    /// after the next trace began, or the load is ending).
    #[inline]
    fn here(&mut self, t: usize) {
        if self.traces[t].is_none() {
            self.scan_ahead.take_back(t, &mut self.traces);
        }
    }

    /// Converts one trace-entry dict and appends it to `trace`.
    fn push_event(&mut self, heap: &mut Heap, d: u32, trace: usize, offset: u64) -> R<()> {
        self.here(trace);
        let index = self.traces[trace].as_ref().map_or(0, Trace::len);
        let place = || event_place(index, trace, offset);
        let Some(items) = heap.take_dict_items(d) else {
            return Err(schema(place(), "trace entry was already consumed"));
        };
        let result = self.convert_event(heap, &items, trace, &place);
        heap.recycle_dict(d, items);
        result
    }

    fn convert_event(
        &mut self,
        heap: &mut Heap,
        items: &[(H, H)],
        trace: usize,
        place: &dyn Fn() -> String,
    ) -> R<()> {
        let mut raw = RawEvent::default();
        let mut extra = Extra::new();
        let mut seen_user_metadata = false;
        for &(k, v) in items {
            let field = self.field_of(heap, k);
            let int = |name: &str| {
                int_of(heap, v).ok_or_else(|| {
                    schema(
                        place(),
                        format!("`{name}` must be an int, found {}", type_name(v)),
                    )
                })
            };
            match field {
                fields::ACTION => match v {
                    _ if v.is_str() => raw.action = Some(v),
                    _ => {
                        return Err(schema(
                            place(),
                            format!("`action` must be a string, found {}", type_name(v)),
                        ));
                    }
                },
                fields::ADDR => raw.addr = Some(int("addr")?),
                fields::DEVICE_FREE => raw.device_free = Some(int("device_free")?),
                fields::SIZE => raw.size = Some(int("size")?),
                fields::STREAM => raw.stream = Some(int("stream")?),
                fields::TIME => {
                    raw.time_us = Some(int("time_us")?);
                    raw.time_after_user_metadata = seen_user_metadata;
                }
                fields::COMPILE_CONTEXT if v.is_str() => raw.compile_context = Some(v),
                fields::USER_METADATA if v.is_str() => {
                    seen_user_metadata = true;
                    raw.user_metadata = Some(v)
                }
                fields::POOL_ID => raw.pool_id = Some(v),
                fields::FRAMES => raw.frames = Some(v),
                _ => {
                    let name = match heap.as_str(k) {
                        Some(s) => s.to_owned(),
                        None => self.owned(heap, k, 0)?.key_string(),
                    };
                    let ov = self.owned(heap, v, 0)?;
                    extra.push((name, ov));
                }
            }
        }

        self.finish_event(heap, &raw, extra, trace, place)
    }

    /// Interns the fields of a trace entry and appends it to `trace`.
    fn finish_event(
        &mut self,
        heap: &mut Heap,
        raw: &RawEvent,
        mut extra: Extra,
        trace: usize,
        place: &dyn Fn() -> String,
    ) -> R<()> {
        let action = match raw.action {
            Some(v) if v.is_str() => self.action_of(heap, v, place)?,
            _ => return Err(schema(place(), "trace entry has no `action`")),
        };
        let mut fl = 0u16;
        let mut addr = 0u64;
        let put_addr = |v: i128, fl: &mut u16| -> R<u64> {
            if let Ok(u) = u64::try_from(v) {
                Ok(u)
            } else if let Ok(i) = i64::try_from(v) {
                *fl |= flags::ADDR_NEGATIVE;
                Ok(i as u64)
            } else {
                Err(schema(place(), format!("address {v} does not fit 64 bits")))
            }
        };
        if let Some(a) = raw.addr {
            fl |= flags::ADDR;
            addr = put_addr(a, &mut fl)?;
        }
        if let Some(a) = raw.device_free {
            if raw.addr.is_some() {
                // Both keys: keep device_free as an extra so nothing is lost.
                extra.push(("device_free".into(), int_value(a)));
            } else {
                fl |= flags::DEVICE_FREE;
                addr = put_addr(a, &mut fl)?;
            }
        }
        let size = match raw.size {
            Some(s) => {
                fl |= flags::SIZE;
                u64::try_from(s).map_err(|_| {
                    schema(place(), format!("`size` is {s}; sizes cannot be negative"))
                })?
            }
            None => 0,
        };
        let stream = match raw.stream {
            Some(s) => {
                fl |= flags::STREAM;
                if s > i64::MAX as i128 {
                    fl |= flags::STREAM_UNSIGNED;
                }
                i64::try_from(s)
                    .or_else(|_| u64::try_from(s).map(|u| u as i64))
                    .map_err(|_| schema(place(), "`stream` does not fit 64 bits"))?
            }
            None => 0,
        };
        let time_us = match raw.time_us {
            Some(t) => {
                fl |= flags::TIME;
                if raw.time_after_user_metadata {
                    fl |= flags::TIME_LATE;
                }
                i64::try_from(t).map_err(|_| schema(place(), "`time_us` does not fit 64 bits"))?
            }
            None => 0,
        };
        let stack = match (raw.frames, raw.stack) {
            (Some(f), _) => {
                fl |= flags::FRAMES;
                self.stack_of(heap, f, place)?
            }
            (None, Some(s)) => {
                fl |= flags::FRAMES;
                s
            }
            (None, None) => StackId::EMPTY,
        };
        let pool_id = match raw.pool_id {
            Some(p) => Some(self.owned(heap, p, 0)?),
            None => None,
        };
        // Real files write `compile_context` as a fresh string per event, so the key is the
        // strings' content (exact for short ones), not their identity.
        let raw_key = (
            fl,
            stream,
            short_str_key(raw.compile_context.and_then(|v| heap.as_str(v))),
            short_str_key(raw.user_metadata.and_then(|v| heap.as_str(v))),
        );
        let cacheable = raw_key.2 != NOT_SHORT
            && raw_key.3 != NOT_SHORT
            && pool_id.is_none()
            && extra.is_empty();
        let hit = if cacheable {
            self.recent_raw_metas[..self.recent_raw_len]
                .iter()
                .position(|(k, _)| *k == raw_key)
        } else {
            None
        };
        let meta = match hit {
            Some(i) => {
                let id = self.recent_raw_metas[i].1;
                // One step towards the front, so the common keys stay cheap to find
                // (a swap: rotating the run before it moved up to 400 bytes per event).
                if i > 0 {
                    self.recent_raw_metas.swap(i - 1, i);
                }
                id
            }
            None => {
                let cc = raw.compile_context.and_then(|v| heap.as_str(v));
                let um = raw.user_metadata.and_then(|v| heap.as_str(v));
                let id = self.meta_id(fl, stream, cc, um, pool_id, extra);
                if cacheable {
                    let n = (self.recent_raw_len + 1).min(self.recent_raw_metas.len());
                    self.recent_raw_metas[..n].rotate_right(1);
                    self.recent_raw_metas[0] = (raw_key, id);
                    self.recent_raw_len = n;
                }
                id
            }
        };
        if raw.addr.is_none() && action_needs_address(action) {
            // No replay can place it: counted and reported, not kept. Checked last so
            // that a field of the wrong type is still an error.
            self.addrless += 1;
            if self.first_addrless.is_none() {
                self.first_addrless = Some(place());
            }
            return Ok(());
        }
        if let Some(t) = self.traces[trace].as_mut() {
            t.push(action, addr, size, time_us, stack, meta);
            self.counted += EVENT_BYTES;
        }
        Ok(())
    }

    /// The action code of an action string. Action strings are memoized and shared, so
    /// the code is cached by the string's identity (its table index or input span).
    #[inline]
    fn action_of(&mut self, heap: &Heap, v: H, place: &dyn Fn() -> String) -> R<Action> {
        let key = match v {
            H::Str(i) => i as u64,
            H::Span(x) => x | 1 << 63,
            _ => return Err(schema(place(), "`action` must be a string")),
        };
        // A handful of action strings cover a whole file: look in a tiny array first.
        if let Some(&(_, a)) = self.recent_actions.iter().find(|(k, _)| *k == key) {
            return Ok(Action(a));
        }
        if let Some(&a) = self.action_cache.get(&key) {
            self.recent_actions.rotate_right(1);
            self.recent_actions[0] = (key, a);
            return Ok(Action(a));
        }
        let a = self
            .snap
            .actions
            .code(heap.as_str(v).unwrap_or(""))
            .ok_or_else(|| schema(place(), "more than 256 distinct action names"))?;
        self.action_cache.insert(key, a.0);
        self.recent_actions.rotate_right(1);
        self.recent_actions[0] = (key, a.0);
        Ok(a)
    }

    /// Interns `prefix` + `items` as the stack of `list` when every item is a frame (one
    /// pass: already-interned frames cost a match, new frame dicts are interned on the
    /// way); otherwise leaves the list alone.
    fn frames_into_stack(
        &mut self,
        heap: &mut Heap,
        list: u32,
        prefix: Option<StackId>,
        items: &[H],
        offset: u64,
    ) -> R<Absorbed> {
        let place = || match offset {
            u64::MAX => "a frames list".to_string(),
            _ => format!("a frames list (near byte {offset})"),
        };
        let mut ids = std::mem::take(&mut self.frame_scratch);
        ids.clear();
        if let Some(p) = prefix {
            ids.extend(self.stacks.frames(p));
        }
        let mut all_frames = true;
        for &v in items {
            let id = match v {
                H::Frame(f) => f,
                H::Dict(d) => match &heap.dicts[d as usize] {
                    DictSlot::Frame(f) => *f,
                    _ if Self::is_frame(heap, v) => self.frame_of(heap, v, &place)?,
                    _ => {
                        all_frames = false;
                        break;
                    }
                },
                _ => {
                    all_frames = false;
                    break;
                }
            };
            ids.push(id);
        }
        let result = if all_frames {
            let id = self.stacks.intern(&ids);
            heap.lists[list as usize] = ListSlot::Stack(id);
            heap.forget_frames(items);
            Absorbed::Taken
        } else if let Some(p) = prefix {
            // Frames then something else: give the list its items back.
            let mut back: Vec<H> = self.stacks.frames(p).into_iter().map(H::Frame).collect();
            back.extend_from_slice(items);
            heap.lists[list as usize] = ListSlot::Items(back);
            Absorbed::Taken
        } else {
            Absorbed::No
        };
        self.frame_scratch = ids;
        Ok(result)
    }

    /// True for a frame dict (or an interned frame): it has a `filename` and no `action`.
    fn is_frame(heap: &Heap, v: H) -> bool {
        match v {
            H::Frame(_) => true,
            H::Dict(d) => match &heap.dicts[d as usize] {
                DictSlot::Frame(_) => true,
                DictSlot::Items { items, .. } => {
                    items
                        .iter()
                        .any(|(k, _)| heap.as_str(*k) == Some("filename"))
                        && !items.iter().any(|(k, _)| heap.as_str(*k) == Some("action"))
                }
                DictSlot::Free(_) => false,
            },
            _ => false,
        }
    }

    /// A new trace, its columns reserved for as many events as the rest of the input
    /// could hold: capacity never touched costs address space, not memory, and saves
    /// copying the columns each time they would double.
    fn new_trace(&mut self, offset: u64) -> usize {
        // A new trace list means the one before it is most likely complete.
        if let Some(prev) = self.traces.len().checked_sub(1) {
            self.lend(prev);
        }
        let left = (self.input_len as u64).saturating_sub(offset);
        let mut t = Trace::default();
        if offset != u64::MAX && left > (1 << 20) {
            t.reserve((left / MIN_EVENT_BYTES) as usize);
        }
        self.traces.push(Some(t));
        self.traces.len() - 1
    }

    // ---------- owned values ----------

    /// Copies a heap value into an owned [`Value`], bounded in depth and total size so a
    /// self-referencing or exponentially shared structure gets an error, not a hang.
    fn owned(&mut self, heap: &Heap, v: H, depth: usize) -> R<Value> {
        if depth > MAX_DEPTH {
            return Err(schema(
                "a nested value",
                format!(
                    "nesting deeper than {MAX_DEPTH} levels (or a container that contains itself)"
                ),
            ));
        }
        let text = match v {
            H::Str(_) | H::Span(_) => heap.as_str(v).map_or(0, str::len),
            H::Bytes(b) => heap.bytes[b as usize].len(),
            _ => 0,
        };
        self.charge(NODE_BYTES + text)?;
        Ok(match v {
            H::None | H::Gone | H::Event(_) | H::Appended => Value::Null,
            H::Frame(f) => self.frame_owned(f)?,
            H::Stack(s) => self.stack_value(s)?,
            H::True => Value::Bool(true),
            H::False => Value::Bool(false),
            H::Int(i) => Value::Int(i),
            H::Big(b) => int_value(heap.bigs[b as usize]),
            H::Float(f) => Value::Float(f),
            H::Str(_) | H::Span(_) => Value::Str(heap.string(v).unwrap_or_default()),
            H::Bytes(b) => Value::Bytes(heap.bytes[b as usize].to_vec()),
            H::Tuple(t) => {
                let items = heap.tuple(t).to_vec();
                let mut out = Vec::with_capacity(items.len());
                for i in items {
                    out.push(self.owned(heap, i, depth + 1)?);
                }
                Value::Tuple(out)
            }
            H::List(l) => match &heap.lists[l as usize] {
                ListSlot::Items(items) => {
                    let items = items.clone();
                    let mut out = Vec::with_capacity(items.len());
                    for i in items {
                        out.push(self.owned(heap, i, depth + 1)?);
                    }
                    Value::List(out)
                }
                ListSlot::Stack(s) => {
                    let s = *s;
                    self.stack_value(s)?
                }
                ListSlot::Events(_) => {
                    self.snap
                        .warnings
                        .push("a list of trace entries outside device_traces was dropped".into());
                    Value::Null
                }
            },
            H::Dict(d) => match &heap.dicts[d as usize] {
                DictSlot::Items { items, .. } => {
                    let items = items.clone();
                    let mut out = Vec::with_capacity(items.len());
                    for (k, val) in items {
                        let k = self.owned(heap, k, depth + 1)?;
                        let val = self.owned(heap, val, depth + 1)?;
                        out.push((k, val));
                    }
                    Value::Map(out)
                }
                DictSlot::Frame(f) => {
                    let f = *f;
                    self.frame_owned(f)?
                }
                DictSlot::Free(_) => Value::Null,
            },
        })
    }

    fn frame_value(&self, f: FrameId) -> Value {
        let fr = self.snap.frames.get(f);
        let mut m = vec![
            (
                Value::Str("name".into()),
                Value::Str(self.snap.strings.get(fr.name).into()),
            ),
            (
                Value::Str("filename".into()),
                Value::Str(self.snap.strings.get(fr.filename).into()),
            ),
            (Value::Str("line".into()), int_value(fr.line.value())),
        ];
        m.extend(
            fr.extra
                .iter()
                .map(|(k, v)| (Value::Str(k.clone()), v.clone())),
        );
        Value::Map(m)
    }

    /// A stack as an owned list of frame maps, charged to the node budget by its size (one
    /// reference to a long stack expands to hundreds of values).
    fn stack_value(&mut self, s: StackId) -> R<Value> {
        let frames = self.stacks.frames(s);
        let mut out = Vec::with_capacity(frames.len());
        for f in frames {
            out.push(self.frame_owned(f)?);
        }
        Ok(Value::List(out))
    }

    /// [`Builder::frame_value`], charged to the node budget by its size.
    fn frame_owned(&mut self, f: FrameId) -> R<Value> {
        let fr = self.snap.frames.get(f);
        let extra: usize = fr
            .extra
            .iter()
            .map(|(_, v)| 1 + v.node_count() as usize)
            .sum();
        let text = self.snap.strings.get(fr.name).len() + self.snap.strings.get(fr.filename).len();
        self.charge((FRAME_NODES + extra) * NODE_BYTES + text)?;
        Ok(self.frame_value(f))
    }

    /// Counts `n` bytes of model built; fails when more was built since the machine last
    /// checked the memory bound than it left room for (a shared value expanded within
    /// one call, or the rest of the file converted after the parse).
    fn charge(&mut self, n: usize) -> R<()> {
        self.counted = self.counted.saturating_add(n);
        self.spent = self.spent.saturating_add(n);
        if self.spent > self.room {
            let held = super::bound::allowed(self.read) + (self.spent - self.room);
            return Err(super::bound::exceeded(
                None,
                "values the file shares, expanded",
                held,
                self.read,
            ));
        }
        Ok(())
    }

    // ---------- the rest of the file ----------

    fn dict_items(heap: &Heap, v: H, place: &dyn Fn() -> String) -> R<Vec<(H, H)>> {
        Self::dict_slice(heap, v, place).map(<[_]>::to_vec)
    }

    /// The items of dict `v`, borrowed (where the heap is not changed meanwhile).
    fn dict_slice<'h>(heap: &'h Heap, v: H, place: &dyn Fn() -> String) -> R<&'h [(H, H)]> {
        match v {
            H::Dict(d) => heap
                .dict_items(d)
                .ok_or_else(|| schema(place(), "expected a dict")),
            other => Err(schema(
                place(),
                format!("expected a dict, found {}", type_name(other)),
            )),
        }
    }

    fn list_items(heap: &Heap, v: H, place: &dyn Fn() -> String) -> R<Vec<H>> {
        match v {
            H::List(l) => match &heap.lists[l as usize] {
                ListSlot::Items(items) => Ok(items.clone()),
                _ => Err(schema(place(), "expected a plain list")),
            },
            H::Tuple(t) => Ok(heap.tuple(t).to_vec()),
            other => Err(schema(
                place(),
                format!("expected a list, found {}", type_name(other)),
            )),
        }
    }

    fn u64_field(heap: &Heap, v: H, field: &str, place: &dyn Fn() -> String) -> R<u64> {
        let i = int_of(heap, v).ok_or_else(|| {
            schema(
                place(),
                format!("`{field}` must be an int, found {}", type_name(v)),
            )
        })?;
        u64::try_from(i)
            .or_else(|_| i64::try_from(i).map(|x| x as u64))
            .map_err(|_| schema(place(), format!("`{field}` = {i} does not fit 64 bits")))
    }

    fn size_field(heap: &Heap, v: H, field: &str, place: &dyn Fn() -> String) -> R<u64> {
        let i = int_of(heap, v).ok_or_else(|| {
            schema(
                place(),
                format!("`{field}` must be an int, found {}", type_name(v)),
            )
        })?;
        u64::try_from(i).map_err(|_| {
            schema(
                place(),
                format!("`{field}` is {i}; sizes cannot be negative"),
            )
        })
    }

    fn i64_field(heap: &Heap, v: H, field: &str, place: &dyn Fn() -> String) -> R<i64> {
        let i = int_of(heap, v).ok_or_else(|| {
            schema(
                place(),
                format!("`{field}` must be an int, found {}", type_name(v)),
            )
        })?;
        i64::try_from(i)
            .or_else(|_| u64::try_from(i).map(|u| u as i64))
            .map_err(|_| schema(place(), format!("`{field}` = {i} does not fit 64 bits")))
    }

    fn segment(&mut self, heap: &mut Heap, v: H, si: usize) -> R<Segment> {
        let place = || format!("segments[{si}]");
        self.charge(size_of::<Segment>())?;
        let items = Self::dict_items(heap, v, &place)?;
        let mut seg = Segment {
            device: None,
            address: 0,
            total_size: 0,
            allocated_size: None,
            active_size: None,
            requested_size: None,
            stream: None,
            segment_type: None,
            pool_id: None,
            is_expandable: None,
            stack: None,
            blocks: Vec::new(),
            npu_key_order: false,
            extra: Extra::new(),
        };
        let (mut have_address, mut have_total) = (false, false);
        let mut seen_type = false;
        let mut blocks_value = None;
        for (k, val) in items {
            match heap.as_str(k) {
                Some("device") => seg.device = Some(Self::i64_field(heap, val, "device", &place)?),
                Some("address") => {
                    seg.address = Self::u64_field(heap, val, "address", &place)?;
                    have_address = true;
                }
                Some("total_size") => {
                    seg.total_size = Self::size_field(heap, val, "total_size", &place)?;
                    have_total = true;
                }
                Some("allocated_size") => {
                    seg.allocated_size =
                        Some(Self::size_field(heap, val, "allocated_size", &place)?)
                }
                Some("active_size") => {
                    seg.active_size = Some(Self::size_field(heap, val, "active_size", &place)?)
                }
                Some("requested_size") => {
                    seg.requested_size =
                        Some(Self::size_field(heap, val, "requested_size", &place)?)
                }
                Some("stream") => seg.stream = Some(Self::i64_field(heap, val, "stream", &place)?),
                Some("segment_type") if val.is_str() => {
                    seen_type = true;
                    seg.segment_type = heap.string(val)
                }
                Some("segment_pool_id") => {
                    seg.npu_key_order = !seen_type;
                    seg.pool_id = Some(self.owned(heap, val, 0)?)
                }
                Some("is_expandable") if matches!(val, H::True | H::False) => {
                    seg.is_expandable = Some(val == H::True)
                }
                Some("frames") => seg.stack = Some(self.stack_of(heap, val, &place)?),
                Some("blocks") => blocks_value = Some(val),
                _ => {
                    let key = self.owned(heap, k, 0)?.key_string();
                    let ov = self.owned(heap, val, 0)?;
                    seg.extra.push((key, ov));
                }
            }
        }
        if !have_address {
            return Err(schema(place(), "segment has no `address`"));
        }
        if !have_total {
            return Err(schema(place(), "segment has no `total_size`"));
        }
        if !seen_type {
            seg.npu_key_order = false;
        }
        if let Some(bv) = blocks_value {
            let blocks = Self::list_items(heap, bv, &|| format!("segments[{si}].blocks"))?;
            let mut next = seg.address;
            for (bi, b) in blocks.into_iter().enumerate() {
                let block = self.block(heap, b, si, bi, next)?;
                next = block.address.wrapping_add(block.size);
                seg.blocks.push(block);
            }
        }
        Ok(seg)
    }

    fn block(&mut self, heap: &mut Heap, v: H, si: usize, bi: usize, computed: u64) -> R<Block> {
        let place = || format!("segments[{si}].blocks[{bi}]");
        self.charge(size_of::<Block>())?;
        let items = Self::dict_items(heap, v, &place)?;
        let mut b = Block {
            address: computed,
            address_in_file: false,
            size: 0,
            requested_size: None,
            state: BlockState::Other(String::new()),
            stack: None,
            history: None,
            extra: Extra::new(),
        };
        let (mut have_size, mut have_state) = (false, false);
        for (k, val) in items {
            match heap.as_str(k) {
                Some("address") => {
                    b.address = Self::u64_field(heap, val, "address", &place)?;
                    b.address_in_file = true;
                }
                Some("size") => {
                    b.size = Self::size_field(heap, val, "size", &place)?;
                    have_size = true;
                }
                Some("requested_size") => {
                    b.requested_size = Some(Self::size_field(heap, val, "requested_size", &place)?)
                }
                Some("state") if val.is_str() => {
                    b.state = BlockState::parse(heap.as_str(val).unwrap_or(""));
                    have_state = true;
                }
                Some("frames") => b.stack = Some(self.stack_of(heap, val, &place)?),
                Some("history") => {
                    let entries = Self::list_items(heap, val, &place)?;
                    let mut hist = Vec::with_capacity(entries.len());
                    for (hi, h) in entries.into_iter().enumerate() {
                        hist.push(self.history_entry(heap, h, si, bi, hi)?);
                    }
                    b.history = Some(hist);
                }
                _ => {
                    let key = self.owned(heap, k, 0)?.key_string();
                    let ov = self.owned(heap, val, 0)?;
                    b.extra.push((key, ov));
                }
            }
        }
        if !have_size {
            return Err(schema(place(), "block has no `size`"));
        }
        if !have_state {
            return Err(schema(place(), "block has no `state` string"));
        }
        Ok(b)
    }

    fn history_entry(
        &mut self,
        heap: &mut Heap,
        v: H,
        si: usize,
        bi: usize,
        hi: usize,
    ) -> R<HistoryEntry> {
        let place = || format!("segments[{si}].blocks[{bi}].history[{hi}]");
        self.charge(size_of::<HistoryEntry>())?;
        let items = Self::dict_items(heap, v, &place)?;
        let mut h = HistoryEntry {
            addr: 0,
            real_size: 0,
            stack: None,
            extra: Extra::new(),
        };
        for (k, val) in items {
            match heap.as_str(k) {
                Some("addr") => h.addr = Self::u64_field(heap, val, "addr", &place)?,
                Some("real_size") => {
                    h.real_size = Self::size_field(heap, val, "real_size", &place)?
                }
                Some("frames") => h.stack = Some(self.stack_of(heap, val, &place)?),
                _ => {
                    let key = self.owned(heap, k, 0)?.key_string();
                    let ov = self.owned(heap, val, 0)?;
                    h.extra.push((key, ov));
                }
            }
        }
        Ok(h)
    }

    fn annotation(&mut self, heap: &Heap, v: H, i: usize) -> R<Annotation> {
        let place = || format!("external_annotations[{i}]");
        self.charge(size_of::<Annotation>())?;
        let items = Self::dict_slice(heap, v, &place)?;
        let mut a = Annotation {
            stage: None,
            name: None,
            device: None,
            time_us: None,
            extra: Extra::new(),
        };
        for &(k, val) in items {
            match (heap.as_str(k), val) {
                (Some("stage"), v) if v.is_str() => a.stage = heap.string(val),
                (Some("name"), v) if v.is_str() => a.name = heap.string(val),
                (Some("device"), H::Int(d)) => a.device = Some(d),
                (Some("time_us"), H::Int(t)) => a.time_us = Some(t),
                _ => {
                    let key = self.owned(heap, k, 0)?.key_string();
                    let ov = self.owned(heap, val, 0)?;
                    a.extra.push((key, ov));
                }
            }
        }
        Ok(a)
    }

    /// Converts a `device_traces`-like list of lists into traces.
    fn traces(&mut self, heap: &mut Heap, v: H, key: &str) -> R<Vec<Trace>> {
        let lists = Self::list_items(heap, v, &|| key.to_string())?;
        let mut out = Vec::with_capacity(lists.len());
        for (i, l) in lists.into_iter().enumerate() {
            let place = || format!("{key}[{i}]");
            let H::List(li) = l else {
                return Err(schema(
                    place(),
                    format!("expected a list of trace entries, found {}", type_name(l)),
                ));
            };
            let mut trace = match &heap.lists[li as usize] {
                ListSlot::Events(t) => {
                    let t = *t as usize;
                    self.here(t);
                    self.traces[t].take().unwrap_or_default()
                }
                ListSlot::Items(items) => {
                    // Not absorbed while parsing (JSON path or an odd first item): convert now.
                    let items = items.clone();
                    let t = self.new_trace(u64::MAX);
                    for (ei, e) in items.into_iter().enumerate() {
                        match e {
                            H::Dict(d) if Self::is_trace_entry(heap, e) => {
                                self.push_event(heap, d, t, u64::MAX)?
                            }
                            other => {
                                return Err(schema(
                                    format!("{key}[{i}][{ei}]"),
                                    format!(
                                        "expected a trace entry dict with `action`, found {}",
                                        type_name(other)
                                    ),
                                ));
                            }
                        }
                    }
                    self.traces[t].take().unwrap_or_default()
                }
                ListSlot::Stack(_) => {
                    return Err(schema(place(), "expected trace entries, found frames"));
                }
            };
            trace.shrink_to_fit();
            out.push(trace);
        }
        Ok(out)
    }

    /// Builds the snapshot from the top value.
    pub fn finish(mut self, heap: &mut Heap, top: H) -> R<Snapshot> {
        match top {
            H::List(_) => {
                self.snap.layout = Layout::SegmentList;
                let segs = Self::list_items(heap, top, &|| "the top-level list".into())?;
                for (i, s) in segs.into_iter().enumerate() {
                    let seg = self.segment(heap, s, i)?;
                    self.snap.segments.push(seg);
                }
            }
            H::Dict(_) => {
                self.snap.layout = Layout::Dict;
                // The last trace is complete now: scanned while the rest is converted.
                for t in 0..self.traces.len() {
                    self.lend(t);
                }
                let items = Self::dict_items(heap, top, &|| "the top-level dict".into())?;
                // Snapshot keys are strings; anything else is some other pickle.
                if let Some((k, _)) = items.iter().find(|(k, _)| heap.as_str(*k).is_none()) {
                    return Err(LoadErrorKind::NotASnapshot(format!(
                        "the top-level dict has a key that is {}, not a string",
                        type_name(*k)
                    )));
                }
                // A key given twice: the last value counts, as in the dict Python builds.
                let keep: Vec<bool> = {
                    let mut last: FastMap<&str, usize> = FastMap::default();
                    for (i, (k, _)) in items.iter().enumerate() {
                        last.insert(heap.as_str(*k).unwrap_or(""), i);
                    }
                    (0..items.len())
                        .map(|i| last.get(heap.as_str(items[i].0).unwrap_or("")) == Some(&i))
                        .collect()
                };
                let mut repeated: std::collections::BTreeMap<String, u64> = Default::default();
                // Traces are converted last, so that their scans run meanwhile.
                let mut trace_keys = Vec::new();
                for (i, (k, v)) in items.into_iter().enumerate() {
                    let key = heap.as_str(k).unwrap_or("").to_owned();
                    if !keep[i] {
                        *repeated.entry(key).or_insert(1) += 1;
                        continue;
                    }
                    self.snap.top_keys.push(key.clone());
                    match key.as_str() {
                        "segments" => {
                            let segs = Self::list_items(heap, v, &|| "segments".into())?;
                            for (i, s) in segs.into_iter().enumerate() {
                                let seg = self.segment(heap, s, i)?;
                                self.snap.segments.push(seg);
                            }
                        }
                        "device_traces" | "host_traces" => trace_keys.push((key, v)),
                        "allocator_settings" => {
                            self.snap.allocator_settings = Some(self.owned(heap, v, 0)?)
                        }
                        "host_segments" => self.snap.host_segments = Some(self.owned(heap, v, 0)?),
                        "external_annotations" => {
                            let list =
                                Self::list_items(heap, v, &|| "external_annotations".into())?;
                            let mut anns = Vec::with_capacity(list.len());
                            for (i, a) in list.into_iter().enumerate() {
                                anns.push(self.annotation(heap, a, i)?);
                            }
                            self.snap.external_annotations = Some(anns);
                        }
                        _ => {
                            let ov = self.owned(heap, v, 0)?;
                            self.snap.extra.push((key, ov));
                        }
                    }
                }
                for (key, v) in trace_keys {
                    let t = Some(self.traces(heap, v, &key)?);
                    match key.as_str() {
                        "device_traces" => self.snap.device_traces = t,
                        _ => self.snap.host_traces = t,
                    }
                }
                for (key, n) in repeated {
                    self.snap.warnings.push(format!(
                        "the top-level key `{key}` appears {n} times; the last value is used"
                    ));
                }
            }
            other => {
                return Err(schema(
                    "the top level",
                    format!(
                        "expected a dict (or a list of segments), found {}",
                        type_name(other)
                    ),
                ));
            }
        }
        if self.snap.layout == Layout::Dict
            && !self
                .snap
                .top_keys
                .iter()
                .any(|k| k == "segments" || k == "device_traces")
        {
            let keys: Vec<&str> = self
                .snap
                .top_keys
                .iter()
                .take(5)
                .map(String::as_str)
                .collect();
            return Err(LoadErrorKind::NotASnapshot(format!(
                "the top-level dict has neither `segments` nor `device_traces` (its keys: {})",
                keys.join(", ")
            )));
        }
        if self.addrless > 0 {
            self.snap.events_without_address = self.addrless;
            self.snap.warnings.push(format!(
                "{} alloc/free trace entries without an address were left out of the trace \
                 (the first: {})",
                self.addrless,
                self.first_addrless.as_deref().unwrap_or("?")
            ));
        }
        let unknown: Vec<_> = (Action::KNOWN.len()..self.snap.actions.len())
            .map(|i| self.snap.actions.name(Action(i as u8)).to_string())
            .collect();
        if !unknown.is_empty() {
            self.snap.warnings.push(format!(
                "unknown trace actions kept as they are: {}",
                unknown.join(", ")
            ));
        }
        let threaded = self.threaded;
        let (table, ids) = self.stacks.finish();
        let mut snap = self.snap;
        snap.stacks = table;
        remap_stacks(&mut snap, &ids, threaded);
        Ok(snap)
    }
}

/// Flags, stream and the short-string keys of `compile_context` and `user_metadata`.
type RawMetaKey = (u16, i64, (u64, u64), (u64, u64));

/// `short_str_key` of a string that is too long to pack (never equal to a real key).
const NOT_SHORT: (u64, u64) = (u64::MAX, u64::MAX);

/// An exact key for a string of up to 15 bytes (its bytes and length packed in two
/// words), or [`NOT_SHORT`]. Absent is `(0, 0)`; present strings have bit 63 set.
#[inline]
fn short_str_key(s: Option<&str>) -> (u64, u64) {
    let Some(s) = s else { return (0, 0) };
    let b = s.as_bytes();
    if b.len() > 15 {
        return NOT_SHORT;
    }
    // Shifted into registers byte by byte: a copy into an array and two 8-byte loads
    // back stalled on the partial stores (a fifth of this function, measured).
    let (mut lo, mut hi) = (0u64, (b.len() as u64 | 0x80) << 56);
    for (i, &x) in b.iter().enumerate() {
        if i < 8 {
            lo |= (x as u64) << (8 * i);
        } else {
            hi |= (x as u64) << (8 * (i - 8));
        }
    }
    (lo, hi)
}

/// Actions whose meaning is an address: without one, the event cannot be replayed.
fn action_needs_address(a: Action) -> bool {
    matches!(
        a,
        Action::ALLOC
            | Action::FREE_REQUESTED
            | Action::FREE_COMPLETED
            | Action::FREE
            | Action::SEGMENT_ALLOC
            | Action::SEGMENT_FREE
            | Action::SEGMENT_MAP
            | Action::SEGMENT_UNMAP
    )
}

/// Replaces stack tickets by interned ids everywhere the model holds a stack.
fn remap_stacks(snap: &mut Snapshot, ids: &[StackId], threaded: bool) {
    let map = |s: &mut StackId| *s = ids.get(s.index()).copied().unwrap_or(StackId::EMPTY);
    let remap_trace = |t: &mut Trace| {
        t.stack.iter_mut().for_each(map);
        // A scan made ahead saw the tickets.
        if let Some(scan) = t.scan_cell.get_mut() {
            scan.remap_stacks(ids);
        }
    };
    std::thread::scope(|scope| {
        let mut traces = snap
            .device_traces
            .iter_mut()
            .flatten()
            .chain(snap.host_traces.iter_mut().flatten());
        // Long traces after the first are remapped on their own threads meanwhile.
        if let Some(first) = traces.next() {
            for t in traces {
                if threaded && t.len() >= super::scan_ahead::MIN_EVENTS {
                    scope.spawn(|| remap_trace(t));
                } else {
                    remap_trace(t);
                }
            }
            remap_trace(first);
        }
        for seg in &mut snap.segments {
            seg.stack.iter_mut().for_each(map);
            for b in &mut seg.blocks {
                b.stack.iter_mut().for_each(map);
                for h in b.history.iter_mut().flatten() {
                    h.stack.iter_mut().for_each(map);
                }
            }
        }
    });
}

/// Where a trace entry is, for error messages (`offset` is `u64::MAX` when unknown, as in JSON).
fn event_place(index: usize, list: usize, offset: u64) -> String {
    if offset == u64::MAX {
        format!("trace entry {index} of trace list {list}")
    } else {
        format!("trace entry {index} of trace list {list} (near byte {offset})")
    }
}

fn int_value(v: i128) -> Value {
    if let Ok(i) = i64::try_from(v) {
        Value::Int(i)
    } else if let Ok(u) = u64::try_from(v) {
        Value::UInt(u)
    } else {
        Value::BigInt(v.to_string())
    }
}

impl<'a> Absorb<'a> for Builder {
    fn absorb(
        &mut self,
        heap: &mut Heap<'a>,
        list: u32,
        items: &[H],
        single: bool,
        offset: u64,
    ) -> R<Absorbed> {
        // Trace lists placed into their parent list are complete.
        if let Some(H::List(_)) = items.first() {
            for &item in items {
                if let H::List(l) = item
                    && let Some(&ListSlot::Events(t)) = heap.lists.get(l as usize)
                {
                    self.lend(t as usize);
                }
            }
        }
        let trace = match &heap.lists[list as usize] {
            ListSlot::Events(t) => *t as usize,
            ListSlot::Items(existing) if existing.is_empty() => {
                if Self::is_trace_entry(heap, items[0]) {
                    let t = self.new_trace(offset);
                    heap.lists[list as usize] = ListSlot::Events(t as u32);
                    t
                } else if !single {
                    // Perhaps a frames list: intern it now, so its items are never stored.
                    return self.frames_into_stack(heap, list, None, items, offset);
                } else {
                    return Ok(Absorbed::No);
                }
            }
            ListSlot::Stack(old) => {
                // More frames for a list interned from an earlier batch.
                let old = *old;
                return self.frames_into_stack(heap, list, Some(old), items, offset);
            }
            _ => return Ok(Absorbed::No),
        };
        self.here(trace);
        for &item in items {
            match item {
                H::Dict(d) => self.push_event(heap, d, trace, offset)?,
                H::Appended => {}
                H::Event(k) => {
                    let index = self.traces[trace].as_ref().map_or(0, Trace::len);
                    let place = || event_place(index, trace, offset);
                    let raw = heap
                        .pending
                        .get(k as usize)
                        .copied()
                        .ok_or_else(|| schema(place(), "trace entry referenced twice"))?;
                    self.finish_event(heap, &raw, Extra::new(), trace, &place)?;
                }
                _ => {
                    let index = self.traces[trace].as_ref().map_or(0, Trace::len);
                    return Err(schema(
                        event_place(index, trace, offset),
                        format!("expected a trace entry dict, found {}", type_name(item)),
                    ));
                }
            }
        }
        // Entries decoded ahead wait only until their APPENDS: all are consumed now.
        if let Some(H::Event(k)) = items.last()
            && *k as usize + 1 == heap.pending.len()
        {
            heap.pending.clear();
        }
        Ok(Absorbed::Taken)
    }

    fn intern_stack(&mut self, frames: &[FrameId]) -> StackId {
        self.stacks.intern(frames)
    }

    fn append_event(
        &mut self,
        heap: &mut Heap<'a>,
        trace: u32,
        ev: &RawEvent,
        offset: u64,
    ) -> R<()> {
        let trace = trace as usize;
        self.here(trace);
        let index = self.traces[trace].as_ref().map_or(0, Trace::len);
        self.finish_event(heap, ev, Extra::new(), trace, &|| {
            event_place(index, trace, offset)
        })
    }

    fn field_of(&mut self, heap: &Heap<'a>, key: H) -> u8 {
        Builder::field_of(self, heap, key)
    }

    fn held_bytes(&self) -> usize {
        self.counted
            + self.snap.strings.held_bytes()
            + self.snap.frames.held_bytes()
            + self.stacks.held_bytes()
            + self.field_cache.capacity()
            + self.action_cache.capacity() * 16
    }

    fn set_room(&mut self, room: usize) {
        self.room = room;
        self.spent = 0;
    }

    fn strings_freed(&mut self) {
        self.field_cache.clear();
        self.action_cache.clear();
        self.recent_actions = [(u64::MAX, 0); 8];
    }

    fn regions(&self, out: &mut Vec<Region>) {
        for t in self.traces.iter().flatten() {
            out.extend([
                Region::of(&t.action),
                Region::of(&t.addr),
                Region::of(&t.size),
                Region::of(&t.time_us),
                Region::of(&t.stack),
                Region::of(&t.meta),
            ]);
        }
    }
}
