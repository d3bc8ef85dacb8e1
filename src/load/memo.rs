//! The pickle memo in 8-byte words. A snapshot memoizes about three objects per trace
//! entry (the entry, its frames list, a fresh `compile_context` string), so the memo is the
//! largest buffer the parser writes: every new page of it is zeroed by the kernel first,
//! and at 16 bytes an entry that was a fifth of the load. A word holds a 5-bit tag and a
//! 59-bit payload; the rare values that do not fit (floats, very large ints, strings at
//! offsets beyond 8 TiB) go to a side table.

use super::handle::Value;
use super::prefault::Region;

const TAG_BITS: u32 = 5;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const PAYLOAD_MAX: u64 = (1 << (64 - TAG_BITS)) - 1;

mod tag {
    pub const NONE: u64 = 0;
    pub const TRUE: u64 = 1;
    pub const FALSE: u64 = 2;
    pub const INT: u64 = 3;
    pub const BIG: u64 = 4;
    pub const STR: u64 = 5;
    pub const SPAN: u64 = 6;
    pub const BYTES: u64 = 7;
    pub const LIST: u64 = 8;
    pub const DICT: u64 = 9;
    pub const TUPLE: u64 = 10;
    pub const FRAME: u64 = 11;
    pub const STACK: u64 = 12;
    pub const EVENT: u64 = 13;
    pub const APPENDED: u64 = 14;
    pub const GONE: u64 = 15;
    /// Payload: index into `Memo::wide`.
    pub const WIDE: u64 = 16;
}

/// The memo: dense slots, as picklers number them.
#[derive(Default)]
pub(crate) struct Memo {
    words: Vec<u64>,
    /// Values too wide for a word. Only grows (a truncated slot leaves its entry behind,
    /// at most once per slot written).
    wide: Vec<Value>,
}

impl Memo {
    /// A memo with room for `n` slots reserved (address space only until written).
    pub fn with_capacity(n: usize) -> Self {
        Memo {
            words: Vec::with_capacity(n),
            wide: Vec::new(),
        }
    }

    /// Number of slots.
    #[inline]
    pub fn len(&self) -> usize {
        self.words.len()
    }

    #[inline]
    fn encode(&mut self, v: Value) -> u64 {
        let inline = |t: u64, p: u64| (p << TAG_BITS) | t;
        match v {
            Value::None => tag::NONE,
            Value::True => tag::TRUE,
            Value::False => tag::FALSE,
            Value::Int(i) if (i << TAG_BITS) >> TAG_BITS == i => {
                inline(tag::INT, (i as u64) & PAYLOAD_MAX)
            }
            Value::Big(i) => inline(tag::BIG, i as u64),
            Value::Str(i) => inline(tag::STR, i as u64),
            Value::Span(x) if x <= PAYLOAD_MAX => inline(tag::SPAN, x),
            Value::Bytes(i) => inline(tag::BYTES, i as u64),
            Value::List(i) => inline(tag::LIST, i as u64),
            Value::Dict(i) => inline(tag::DICT, i as u64),
            Value::Tuple(i) => inline(tag::TUPLE, i as u64),
            Value::Frame(f) => inline(tag::FRAME, f.0 as u64),
            Value::Stack(s) => inline(tag::STACK, s.0 as u64),
            Value::Event(i) => inline(tag::EVENT, i as u64),
            Value::Appended => tag::APPENDED,
            Value::Gone => tag::GONE,
            Value::Int(_) | Value::Span(_) | Value::Float(_) => {
                self.wide.push(v);
                inline(tag::WIDE, (self.wide.len() - 1) as u64)
            }
        }
    }

    #[inline]
    fn decode(&self, w: u64) -> Value {
        let p = w >> TAG_BITS;
        let p32 = p as u32;
        match w & TAG_MASK {
            tag::NONE => Value::None,
            tag::TRUE => Value::True,
            tag::FALSE => Value::False,
            // Sign-extend the 59-bit payload.
            tag::INT => Value::Int((w as i64) >> TAG_BITS),
            tag::BIG => Value::Big(p32),
            tag::STR => Value::Str(p32),
            tag::SPAN => Value::Span(p),
            tag::BYTES => Value::Bytes(p32),
            tag::LIST => Value::List(p32),
            tag::DICT => Value::Dict(p32),
            tag::TUPLE => Value::Tuple(p32),
            tag::FRAME => Value::Frame(crate::model::FrameId(p32)),
            tag::STACK => Value::Stack(crate::model::StackId(p32)),
            tag::EVENT => Value::Event(p32),
            tag::APPENDED => Value::Appended,
            tag::GONE => Value::Gone,
            _ => self.wide.get(p as usize).copied().unwrap_or(Value::None),
        }
    }

    /// Appends a slot.
    #[inline]
    pub fn push(&mut self, v: Value) {
        let w = self.encode(v);
        self.words.push(w);
    }

    /// The value in slot `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<Value> {
        self.words.get(i).map(|&w| self.decode(w))
    }

    /// Overwrites slot `i`; false when there is no such slot.
    pub fn set(&mut self, i: usize, v: Value) -> bool {
        if i >= self.words.len() {
            return false;
        }
        let w = self.encode(v);
        self.words[i] = w;
        true
    }

    /// Pads with `None` up to `n` slots.
    pub fn pad_to(&mut self, n: usize) {
        if n > self.words.len() {
            self.words.resize(n, tag::NONE);
        }
    }

    /// Drops the slots from `n` on.
    pub fn truncate(&mut self, n: usize) {
        self.words.truncate(n);
    }

    /// Bytes the memo holds: its slots as written (room reserved ahead is address space
    /// until written) and its side table.
    pub fn held_bytes(&self) -> usize {
        self.words.len() * size_of::<u64>() + self.wide.capacity() * size_of::<Value>()
    }

    /// Every slot's value, in slot order.
    pub fn values(&self) -> impl Iterator<Item = Value> + '_ {
        self.words.iter().map(|&w| self.decode(w))
    }

    /// The slots' buffer, for [`super::prefault`].
    pub fn region(&self) -> Region {
        Region::of(&self.words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FrameId, StackId};

    #[test]
    fn every_kind_of_value_reads_back_as_written() {
        let values = [
            Value::None,
            Value::True,
            Value::False,
            Value::Int(0),
            Value::Int(-1),
            Value::Int((1 << 58) - 1),
            Value::Int(-(1 << 58)),
            Value::Int(1 << 58),
            Value::Int(i64::MIN),
            Value::Int(i64::MAX),
            Value::Big(7),
            Value::Float(-2.5),
            Value::Str(u32::MAX),
            Value::Span((123_456 << 16) | 3),
            Value::Span(u64::MAX),
            Value::Bytes(1),
            Value::List(2),
            Value::Dict(3),
            Value::Tuple(4),
            Value::Frame(FrameId(5)),
            Value::Stack(StackId(u32::MAX)),
            Value::Event(6),
            Value::Appended,
            Value::Gone,
        ];
        let mut m = Memo::with_capacity(4);
        for v in values {
            m.push(v);
        }
        assert_eq!(m.len(), values.len());
        for (i, v) in values.iter().enumerate() {
            assert_eq!(m.get(i), Some(*v), "slot {i}");
        }
        assert!(m.set(0, Value::Float(1.0)));
        assert_eq!(m.get(0), Some(Value::Float(1.0)));
        assert!(!m.set(values.len(), Value::None));
        m.pad_to(values.len() + 2);
        assert_eq!(m.get(values.len() + 1), Some(Value::None));
        m.truncate(1);
        assert_eq!(m.get(1), None);
    }
}
