//! A [`Value`] as a CPython pickle (protocol 4), the way `pickle.dump` lays out the plain
//! data a memory snapshot holds: dicts, lists, tuples, strings, integers, floats, bools
//! and `None`. No memo is written (every value is spelled out), so what memory_viz and
//! `pickle.load` read back is the same tree with nothing shared. Nothing here imports or
//! calls code: the opcodes are the data-only ones of the snapshot format doc (§8.1).
//!
//! ```
//! use leakscope::model::Value;
//! let v = Value::Map(vec![(Value::Str("a".into()), Value::List(vec![Value::Int(1)]))]);
//! let mut out = Vec::new();
//! leakscope::render::pickle::write(&v, &mut out)?;
//! assert_eq!(out, b"\x80\x04}\x8c\x01a]K\x01as.");
//! # Ok::<(), leakscope::error::WriteError>(())
//! ```

use std::io::Write;

use crate::error::WriteError;
use crate::model::Value;

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const MARK: u8 = b'(';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE: u8 = b'X';
const BINUNICODE8: u8 = 0x8d;
const SHORT_BINBYTES: u8 = b'C';
const BINBYTES: u8 = b'B';
const BINBYTES8: u8 = 0x8e;
const EMPTY_LIST: u8 = b']';
const APPEND: u8 = b'a';
const APPENDS: u8 = b'e';
const EMPTY_DICT: u8 = b'}';
const SETITEM: u8 = b's';
const SETITEMS: u8 = b'u';
const EMPTY_TUPLE: u8 = b')';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const TUPLE: u8 = b't';

/// Items per `MARK … APPENDS`/`SETITEMS` batch, as CPython writes them.
const BATCH: usize = 1000;

/// Writes `value` to `w` as a protocol-4 pickle (`PROTO 4` … `STOP`).
pub fn write(value: &Value, w: impl Write) -> Result<(), WriteError> {
    let mut p = Pickler { w };
    p.bytes(&[PROTO, 4])?;
    p.value(value)?;
    p.bytes(&[STOP])
}

struct Pickler<W: Write> {
    w: W,
}

fn io(e: std::io::Error) -> WriteError {
    WriteError::Encode {
        what: "the pickle",
        message: e.to_string(),
    }
}

/// The minimal two's-complement little-endian bytes of `v` (`LONG1`'s payload; empty
/// for 0, as CPython writes it).
pub fn long_bytes(v: i128) -> Vec<u8> {
    if v == 0 {
        return Vec::new();
    }
    let all = v.to_le_bytes();
    let mut n = all.len();
    // Drop top bytes that only repeat the sign, keeping the sign bit right.
    while n > 1 {
        let top = all[n - 1];
        let next_sign = all[n - 2] & 0x80;
        if (top == 0x00 && next_sign == 0) || (top == 0xff && next_sign != 0) {
            n -= 1;
        } else {
            break;
        }
    }
    all[..n].to_vec()
}

impl<W: Write> Pickler<W> {
    fn bytes(&mut self, b: &[u8]) -> Result<(), WriteError> {
        self.w.write_all(b).map_err(io)
    }

    fn int(&mut self, v: i128) -> Result<(), WriteError> {
        if (0..=0xff).contains(&v) {
            self.bytes(&[BININT1, v as u8])
        } else if (0..=0xffff).contains(&v) {
            self.bytes(&[BININT2])?;
            self.bytes(&(v as u16).to_le_bytes())
        } else if (i32::MIN as i128..=i32::MAX as i128).contains(&v) {
            self.bytes(&[BININT])?;
            self.bytes(&(v as i32).to_le_bytes())
        } else {
            let b = long_bytes(v);
            self.bytes(&[LONG1, b.len() as u8])?;
            self.bytes(&b)
        }
    }

    fn text(&mut self, s: &str) -> Result<(), WriteError> {
        let b = s.as_bytes();
        if b.len() < 256 {
            self.bytes(&[SHORT_BINUNICODE, b.len() as u8])?;
        } else if let Ok(n) = u32::try_from(b.len()) {
            self.bytes(&[BINUNICODE])?;
            self.bytes(&n.to_le_bytes())?;
        } else {
            self.bytes(&[BINUNICODE8])?;
            self.bytes(&(b.len() as u64).to_le_bytes())?;
        }
        self.bytes(b)
    }

    fn raw(&mut self, b: &[u8]) -> Result<(), WriteError> {
        if b.len() < 256 {
            self.bytes(&[SHORT_BINBYTES, b.len() as u8])?;
        } else if let Ok(n) = u32::try_from(b.len()) {
            self.bytes(&[BINBYTES])?;
            self.bytes(&n.to_le_bytes())?;
        } else {
            self.bytes(&[BINBYTES8])?;
            self.bytes(&(b.len() as u64).to_le_bytes())?;
        }
        self.bytes(b)
    }

    fn value(&mut self, v: &Value) -> Result<(), WriteError> {
        match v {
            Value::Null => self.bytes(&[NONE]),
            Value::Bool(b) => self.bytes(&[if *b { NEWTRUE } else { NEWFALSE }]),
            Value::Int(i) => self.int(i128::from(*i)),
            Value::UInt(u) => self.int(i128::from(*u)),
            Value::BigInt(s) => match s.parse::<i128>() {
                Ok(i) => self.int(i),
                Err(_) => Err(WriteError::Encode {
                    what: "the pickle",
                    message: format!("integer {s} is beyond 128 bits"),
                }),
            },
            Value::Float(f) => {
                self.bytes(&[BINFLOAT])?;
                self.bytes(&f.to_be_bytes())
            }
            Value::Str(s) => self.text(s),
            Value::Bytes(b) => self.raw(b),
            Value::List(items) => {
                self.bytes(&[EMPTY_LIST])?;
                self.batched(items.len(), APPEND, APPENDS, |p, i| p.value(&items[i]))
            }
            Value::Map(items) => {
                self.bytes(&[EMPTY_DICT])?;
                self.batched(items.len(), SETITEM, SETITEMS, |p, i| {
                    p.value(&items[i].0)?;
                    p.value(&items[i].1)
                })
            }
            Value::Tuple(items) => {
                let close = match items.len() {
                    0 => return self.bytes(&[EMPTY_TUPLE]),
                    1 => TUPLE1,
                    2 => TUPLE2,
                    3 => TUPLE3,
                    _ => {
                        self.bytes(&[MARK])?;
                        TUPLE
                    }
                };
                for item in items {
                    self.value(item)?;
                }
                self.bytes(&[close])
            }
        }
    }

    /// A container's `n` items after its EMPTY_LIST/EMPTY_DICT: one item with `one`,
    /// else batches of [`BATCH`] between MARK and `many`.
    fn batched(
        &mut self,
        n: usize,
        one: u8,
        many: u8,
        mut item: impl FnMut(&mut Self, usize) -> Result<(), WriteError>,
    ) -> Result<(), WriteError> {
        if n == 1 {
            item(self, 0)?;
            return self.bytes(&[one]);
        }
        let mut start = 0;
        while start < n {
            let end = (start + BATCH).min(n);
            self.bytes(&[MARK])?;
            for i in start..end {
                item(self, i)?;
            }
            self.bytes(&[many])?;
            start = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LONG1 payloads as CPython's `pickle.encode_long` gives them.
    #[test]
    fn long_bytes_are_minimal() {
        assert_eq!(long_bytes(0), Vec::<u8>::new());
        assert_eq!(long_bytes(255), vec![0xff, 0x00]);
        assert_eq!(long_bytes(-1), vec![0xff]);
        assert_eq!(long_bytes(-128), vec![0x80]);
        assert_eq!(long_bytes(-129), vec![0x7f, 0xff]);
        assert_eq!(long_bytes(1 << 40), vec![0, 0, 0, 0, 0, 1]);
        assert_eq!(long_bytes(u64::MAX as i128).len(), 9);
    }

    /// Integers take the smallest opcode CPython would use; tuples of two are TUPLE2.
    #[test]
    fn opcodes_follow_cpython() {
        let v = Value::Tuple(vec![Value::Int(256), Value::Int(-1), Value::Int(1 << 40)]);
        let mut out = Vec::new();
        write(&v, &mut out).expect("writes");
        assert_eq!(
            out,
            b"\x80\x04M\x00\x01J\xff\xff\xff\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x87."
        );
    }
}
