//! JSON snapshots (MemSnapDump exports, hand-made files): decoded straight into the same
//! value heap the pickle reader fills, so one builder serves both.

use std::borrow::Cow;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::build::Builder;
use super::pickle::{Absorb, Absorbed, Heap, ListSlot, Value};
use crate::error::LoadErrorKind;

struct Seed<'b, 'h> {
    heap: &'b mut Heap<'h>,
    builder: &'b mut Builder,
    /// The first absorb error (serde's error type cannot carry ours).
    failure: &'b mut Option<LoadErrorKind>,
    /// The memory bound: the input's length (`None`: no bound, the data is in memory
    /// already), and containers to go before the next check.
    bound: &'b mut Bound,
}

/// When the decoded values are checked against the loader's memory bound.
struct Bound {
    input_len: Option<usize>,
    countdown: usize,
}

/// Containers decoded between two checks of the memory bound (each costs at most a few
/// hundred bytes besides its items, which are counted in batches).
const CHECK_EVERY: usize = 4096;

impl<'de, 'b> DeserializeSeed<'de> for Seed<'b, 'de> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// Items are handed to the builder in batches, as a pickle's APPENDS would.
const BATCH: usize = 1000;

impl<'b, 'de> Seed<'b, 'de> {
    fn reborrow(&mut self) -> Seed<'_, 'de> {
        Seed {
            heap: self.heap,
            builder: self.builder,
            failure: self.failure,
            bound: self.bound,
        }
    }

    /// Counts one container towards the next check of the memory bound, and checks it
    /// when due: JSON holds no discarded values, so what is held is live.
    fn count<E: serde::de::Error>(&mut self) -> Result<(), E> {
        let Some(len) = self.bound.input_len else {
            return Ok(());
        };
        self.bound.countdown = self.bound.countdown.saturating_sub(1);
        if self.bound.countdown > 0 {
            return Ok(());
        }
        self.bound.countdown = CHECK_EVERY;
        check(self.heap, self.builder, len).map_err(|e| {
            let msg = e.to_string();
            *self.failure = Some(e);
            E::custom(msg)
        })
    }

    /// Hands a batch to the builder.
    fn flush<E: serde::de::Error>(&mut self, list: u32, batch: &mut Vec<Value>) -> Result<(), E> {
        if batch.is_empty() {
            return Ok(());
        }
        match self.builder.absorb(self.heap, list, batch, false, u64::MAX) {
            Ok(Absorbed::Taken) => {}
            Ok(Absorbed::No) => {
                if let ListSlot::Items(v) = &mut self.heap.lists[list as usize] {
                    v.extend_from_slice(batch);
                }
            }
            Err(e) => {
                let msg = e.to_string();
                *self.failure = Some(e);
                return Err(E::custom(msg));
            }
        }
        batch.clear();
        Ok(())
    }
}

impl<'de, 'b> Visitor<'de> for Seed<'b, 'de> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(if v { Value::True } else { Value::False })
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => self.heap.new_big(v as i128),
        })
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::None)
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Value, E> {
        // A string of the input text is a span of it, as short pickle strings are: no
        // table entry per string (JSON repeats every key in every entry).
        let off = (v.as_ptr() as usize).wrapping_sub(self.heap.data.as_ptr() as usize);
        if off < self.heap.data.len() && v.len() <= 0xffff && off < 1 << 48 {
            return Ok(Value::Span(((off as u64) << 16) | v.len() as u64));
        }
        Ok(self.heap.new_str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(self.heap.new_str(Cow::Owned(v.to_owned())))
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        self.count::<A::Error>()?;
        let list = self.heap.new_list(Vec::new());
        let Value::List(l) = list else { unreachable!() };
        let mut batch = Vec::new();
        while let Some(v) = seq.next_element_seed(self.reborrow())? {
            batch.push(v);
            if batch.len() >= BATCH {
                self.count::<A::Error>()?;
                self.flush::<A::Error>(l, &mut batch)?;
            }
        }
        self.flush::<A::Error>(l, &mut batch)?;
        Ok(list)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        self.count::<A::Error>()?;
        let mut items = Vec::new();
        while let Some(k) = map.next_key_seed(self.reborrow())? {
            let v = map.next_value_seed(self.reborrow())?;
            items.push((k, v));
            if items.len() % BATCH == 0 {
                self.count::<A::Error>()?;
            }
        }
        Ok(self.heap.new_dict(items))
    }
}

/// Decodes JSON text into `heap`, feeding trace lists to `builder` as they complete.
pub(crate) fn decode<'a>(
    data: &'a [u8],
    heap: &mut Heap<'a>,
    builder: &mut Builder,
) -> Result<Value, LoadErrorKind> {
    let mut failure = None;
    let mut bound = Bound {
        input_len: Some(data.len()),
        countdown: CHECK_EVERY,
    };
    let mut de = serde_json::Deserializer::from_slice(data);
    heap.data = data;
    heap.tree = true;
    let seed = Seed {
        heap,
        builder,
        failure: &mut failure,
        bound: &mut bound,
    };
    let result = seed.deserialize(&mut de).and_then(|v| de.end().map(|_| v));
    match result {
        Ok(v) => {
            check(heap, builder, data.len())?;
            Ok(v)
        }
        Err(e) => Err(failure.unwrap_or_else(|| LoadErrorKind::Json(e.to_string()))),
    }
}

/// Checks what the heap and the builder hold against the bound for `input_len` bytes of
/// JSON, and leaves the builder room for the rest.
fn check(heap: &Heap, builder: &mut Builder, input_len: usize) -> Result<(), LoadErrorKind> {
    let held = heap.held_bytes() + builder.held_bytes();
    let room = super::bound::room(held, input_len, None, "the JSON values")?;
    builder.set_room(room);
    Ok(())
}

/// Decodes any serde data source shaped like a snapshot (a Python object walked in
/// place, say) into `heap`, as [`decode`] does JSON text.
pub(crate) fn decode_from<'de, D: Deserializer<'de>>(
    de: D,
    heap: &mut Heap<'de>,
    builder: &mut Builder,
) -> Result<Value, LoadErrorKind> {
    let mut failure = None;
    // The values are in memory already (a Python object walked in place): no bound.
    builder.set_room(usize::MAX);
    heap.tree = true;
    let mut bound = Bound {
        input_len: None,
        countdown: CHECK_EVERY,
    };
    let seed = Seed {
        heap,
        builder,
        failure: &mut failure,
        bound: &mut bound,
    };
    match seed.deserialize(de) {
        Ok(v) => Ok(v),
        Err(e) => Err(failure.unwrap_or_else(|| LoadErrorKind::NotASnapshot(e.to_string()))),
    }
}

/// `text` with every `\\uXXXX` escape of a lone surrogate (one not in a high-low pair)
/// replaced by `\\ufffd`, which has the same length; `None` when there is none.
/// CPython's `json.dumps` writes such escapes for strings that hold lone surrogates.
pub(crate) fn without_lone_surrogates(text: &[u8]) -> Option<Vec<u8>> {
    fn hex4(b: &[u8]) -> Option<u16> {
        let s = std::str::from_utf8(b.get(..4)?).ok()?;
        u16::from_str_radix(s, 16).ok()
    }
    let escape_at = |i: usize| -> Option<u16> {
        (text.get(i) == Some(&b'\\') && text.get(i + 1) == Some(&b'u'))
            .then(|| hex4(&text[i + 2..]))
            .flatten()
    };
    let mut out: Option<Vec<u8>> = None;
    let (mut i, mut in_string) = (0, false);
    while i < text.len() {
        match text[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                if let Some(u) = escape_at(i) {
                    let lone = match u {
                        0xD800..=0xDBFF => {
                            let paired =
                                escape_at(i + 6).is_some_and(|l| (0xDC00..=0xDFFF).contains(&l));
                            if paired {
                                i += 12;
                                continue;
                            }
                            true
                        }
                        0xDC00..=0xDFFF => true,
                        _ => false,
                    };
                    if lone {
                        out.get_or_insert_with(|| text.to_vec())[i..i + 6]
                            .copy_from_slice(b"\\ufffd");
                    }
                    i += 6;
                    continue;
                }
                i += 1; // the escaped character
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::without_lone_surrogates;

    #[test]
    fn lone_surrogate_escapes_become_replacement_characters() {
        let t = br#"{"a": "x\ud800y", "b": "\udc00", "c": "\ud83d\ude00", "d": "\\ud800"}"#;
        let fixed = without_lone_surrogates(t).expect("two lone surrogates");
        assert_eq!(
            std::str::from_utf8(&fixed).unwrap(),
            r#"{"a": "x\ufffdy", "b": "\ufffd", "c": "\ud83d\ude00", "d": "\\ud800"}"#
        );
        assert_eq!(without_lone_surrogates(br#"{"c": "\ud83d\ude00"}"#), None);
    }
}
