//! Freeing what a pickle discarded.
//!
//! The heap's tables only grow while the machine runs: a list that `POP` drops, or a dict
//! built and never stored, keeps its slot. A snapshot never does this, but a valid pickle
//! can (`EMPTY_LIST POP` is two bytes for a 32-byte slot), so when the heap has doubled
//! since the last collection the machine asks for one: every value reachable from its
//! stack and memo is marked, every other slot is freed and reused by the next value of
//! its kind, and slots freed at the end of a table are given back.
//!
//! Handles are indices, so nothing live moves: a slot is freed only when no handle to it
//! remains in the stack, the memo or a live container. The builder keeps no handles
//! between calls, only caches keyed by string slots, which it forgets after a collection
//! that freed strings ([`super::pickle::Absorb::strings_freed`]).

use std::borrow::Cow;

use super::pickle::{DictSlot, Heap, ListSlot, Value};

/// One bit per slot of a table.
struct Marks(Vec<u64>);

impl Marks {
    fn new(n: usize) -> Self {
        Marks(vec![0; n.div_ceil(64)])
    }

    /// Marks slot `i`; whether it was unmarked (and exists).
    #[inline]
    fn set(&mut self, i: u32) -> bool {
        let (w, b) = ((i / 64) as usize, i % 64);
        match self.0.get_mut(w) {
            Some(word) if *word & (1 << b) == 0 => {
                *word |= 1 << b;
                true
            }
            _ => false,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

/// What a collection found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Collected {
    /// Slots freed (of every kind).
    pub freed: usize,
    /// Whether a string slot was freed (caches keyed by string slots are then stale).
    pub strings_freed: bool,
}

struct Marker {
    lists: Marks,
    dicts: Marks,
    tuples: Marks,
    strs: Marks,
    bytes: Marks,
    bigs: Marks,
    events: bool,
    /// Containers marked whose items are still to be visited. Each is pushed once (it is
    /// marked when pushed), so this holds at most one handle per container.
    work: Vec<Value>,
}

impl Marker {
    fn new(heap: &Heap) -> Self {
        Marker {
            lists: Marks::new(heap.lists.len()),
            dicts: Marks::new(heap.dicts.len()),
            tuples: Marks::new(heap.tuple_spans.len()),
            strs: Marks::new(heap.strs.len()),
            bytes: Marks::new(heap.bytes.len()),
            bigs: Marks::new(heap.bigs.len()),
            events: false,
            work: Vec::new(),
        }
    }

    /// Marks `v`; containers newly marked wait in `work` for their items.
    #[inline]
    fn mark(&mut self, v: Value) {
        match v {
            Value::List(i) if self.lists.set(i) => self.work.push(v),
            Value::Dict(i) if self.dicts.set(i) => self.work.push(v),
            Value::Tuple(i) if self.tuples.set(i) => self.work.push(v),
            Value::Str(i) => {
                self.strs.set(i);
            }
            Value::Bytes(i) => {
                self.bytes.set(i);
            }
            Value::Big(i) => {
                self.bigs.set(i);
            }
            Value::Event(_) if !self.events => {
                self.events = true;
                self.work.push(v);
            }
            _ => {}
        }
    }

    /// Visits the items of every container waiting in `work`.
    fn drain(&mut self, heap: &Heap) {
        while let Some(v) = self.work.pop() {
            match v {
                Value::List(i) => {
                    if let Some(ListSlot::Items(items)) = heap.lists.get(i as usize) {
                        for &item in items {
                            self.mark(item);
                        }
                    }
                }
                Value::Dict(i) => {
                    if let Some(DictSlot::Items { items, .. }) = heap.dicts.get(i as usize) {
                        for &(k, item) in items {
                            self.mark(k);
                            self.mark(item);
                        }
                    }
                }
                Value::Tuple(i) => {
                    if let Some(&(start, n)) = heap.tuple_spans.get(i as usize) {
                        let items = heap.tuples.get(start as usize..(start + n) as usize);
                        for &item in items.unwrap_or(&[]) {
                            self.mark(item);
                        }
                    }
                }
                Value::Event(_) => {
                    // A live entry decoded ahead keeps every pending entry (they are
                    // consumed together by the APPENDS that follows).
                    for e in &heap.pending {
                        let fields = [e.action, e.compile_context, e.user_metadata, e.pool_id];
                        for f in fields.into_iter().chain([e.frames]).flatten() {
                            self.mark(f);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

impl Heap<'_> {
    /// Frees every slot that `roots` (the machine's stack), the memo and the containers
    /// they reach do not reach. See the module documentation.
    pub(crate) fn collect(&mut self, roots: &[Value]) -> Collected {
        let mut m = Marker::new(self);
        for &v in roots {
            m.mark(v);
            m.drain(self);
        }
        for v in self.memo.values() {
            m.mark(v);
            m.drain(self);
        }
        let mut out = Collected::default();
        out.freed += sweep(&mut self.lists, &mut self.free_lists, &m.lists, |s| {
            *s = ListSlot::Items(Vec::new())
        });
        out.freed += sweep(&mut self.dicts, &mut self.free_dicts, &m.dicts, |s| {
            *s = DictSlot::Free(Vec::new())
        });
        let strs = sweep(&mut self.strs, &mut self.free_strs, &m.strs, |s| {
            *s = Cow::Borrowed("")
        });
        out.strings_freed = strs > 0;
        out.freed += strs;
        out.freed += sweep(&mut self.bytes, &mut self.free_bytes, &m.bytes, |s| {
            *s = Cow::Borrowed(&[])
        });
        out.freed += sweep(&mut self.bigs, &mut self.free_bigs, &m.bigs, |_| {});
        out.freed += sweep(
            &mut self.tuple_spans,
            &mut self.free_tuples,
            &m.tuples,
            |s| *s = (0, 0),
        );
        self.compact_tuples();
        if !m.events && !self.pending.is_empty() {
            out.freed += self.pending.len();
            self.pending = Vec::new();
        }
        self.recount();
        out
    }

    /// Rewrites the tuples' items without the freed tuples' (their spans are empty).
    fn compact_tuples(&mut self) {
        let live: usize = self.tuple_spans.iter().map(|&(_, n)| n as usize).sum();
        if live == self.tuples.len() {
            return;
        }
        let mut items = Vec::with_capacity(live);
        for span in &mut self.tuple_spans {
            let (start, n) = *span;
            let start_new = items.len() as u32;
            items.extend_from_slice(&self.tuples[start as usize..(start + n) as usize]);
            *span = (start_new, n);
        }
        self.tuples = items;
    }

    /// Recounts the bytes held by items and owned strings after a collection.
    fn recount(&mut self) {
        let lists: usize = self
            .lists
            .iter()
            .map(|s| match s {
                ListSlot::Items(v) => v.capacity() * size_of::<Value>(),
                _ => 0,
            })
            .sum();
        let dicts: usize = self
            .dicts
            .iter()
            .map(|s| match s {
                DictSlot::Items { items, .. } | DictSlot::Free(items) => {
                    items.capacity() * size_of::<(Value, Value)>()
                }
                DictSlot::Frame(_) => 0,
            })
            .sum();
        self.item_bytes = lists + dicts;
        self.owned_str_bytes = self
            .strs
            .iter()
            .map(|s| match s {
                Cow::Owned(o) => o.capacity(),
                Cow::Borrowed(_) => 0,
            })
            .sum();
    }
}

/// Frees the unmarked slots of `table` with `clear`, gives back those at its end, and
/// makes `free` the list of the others. Returns how many slots are free.
fn sweep<T>(
    table: &mut Vec<T>,
    free: &mut Vec<u32>,
    marks: &Marks,
    clear: impl Fn(&mut T),
) -> usize {
    let live_end = (0..table.len())
        .rev()
        .find(|&i| marks.get(i))
        .map_or(0, |i| i + 1);
    let freed = table.len() - live_end;
    table.truncate(live_end);
    if table.capacity() > 2 * table.len() + 1024 {
        table.shrink_to(2 * table.len());
    }
    free.clear();
    for (i, slot) in table.iter_mut().enumerate() {
        if !marks.get(i) {
            clear(slot);
            free.push(i as u32);
        }
    }
    // Reused from the end of the list: lowest slots first keeps the table's tail free.
    free.reverse();
    if free.capacity() > 2 * free.len() + 1024 {
        free.shrink_to(2 * free.len());
    }
    freed + free.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list dropped from the stack is freed, one still on the stack or in the memo is
    /// kept with everything inside it, and the next list takes the freed slot.
    #[test]
    fn unreachable_slots_are_freed_and_reused() {
        let mut heap = Heap::default();
        let inner = heap.new_list(Vec::new());
        let dropped = heap.new_list(Vec::new());
        let kept = heap.new_list(vec![inner]);
        let memoized = heap.new_dict(Vec::new());
        heap.memo.push(memoized);
        let tail = heap.new_tuple(&[Value::Int(1)]);
        let (Value::List(dropped_slot), Value::Tuple(_)) = (dropped, tail) else {
            unreachable!()
        };
        let c = heap.collect(&[kept]);
        // `dropped` (inside the table) and the tuple (at the end) are free.
        assert_eq!(c.freed, 2);
        assert_eq!(heap.free_lists, vec![dropped_slot]);
        assert!(heap.tuple_spans.is_empty());
        assert_eq!(heap.new_list(Vec::new()), Value::List(dropped_slot));
        // What is reachable is untouched.
        match &heap.lists[2] {
            ListSlot::Items(v) => assert_eq!(v, &vec![inner]),
            _ => panic!("the kept list changed"),
        }
        assert!(matches!(heap.dicts[0], DictSlot::Items { .. }));
    }

    /// Freed slots at the end of a table are given back: a stack of discarded lists
    /// leaves no table behind.
    #[test]
    fn discarded_tails_are_given_back() {
        let mut heap = Heap::default();
        for _ in 0..100_000 {
            heap.new_list(Vec::new());
            heap.new_dict(Vec::new());
        }
        let held = heap.held_bytes();
        let c = heap.collect(&[]);
        assert_eq!(c.freed, 200_000);
        assert!(heap.lists.is_empty() && heap.dicts.is_empty());
        assert!(
            heap.held_bytes() < held / 50,
            "{} of {held}",
            heap.held_bytes()
        );
    }
}
