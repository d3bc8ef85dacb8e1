//! A frame's line number, kept exactly as the file holds it.
//!
//! Python frames carry positive lines; C++ frames symbolized by PyTorch's unwinder carry
//! 0, sometimes a negative value, and `2^64-1` (its `uint64_t` "unknown", which pickle
//! writes as a 9-byte `LONG1`). CPython reads all of these, so the model holds the union
//! of the signed and unsigned 64-bit ranges, and an export writes back what was read.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A line number in `i64::MIN..=u64::MAX`.
///
/// ```
/// use leakscope::model::Line;
/// assert_eq!(Line::from(42).to_string(), "42");
/// assert_eq!(Line::UNKNOWN.to_string(), "?");
/// assert_eq!(Line::new(u64::MAX as i128), Some(Line::UNKNOWN));
/// assert_eq!(Line::new(-1).and_then(Line::known), Some(-1));
/// assert_eq!(Line::new(1 << 64), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Line(i128);

impl Line {
    /// `2^64-1`: PyTorch's C++ unwinder's "no line".
    pub const UNKNOWN: Line = Line(u64::MAX as i128);

    /// The line `v`, when it fits a signed or an unsigned 64-bit integer.
    pub fn new(v: i128) -> Option<Line> {
        (i64::MIN as i128..=u64::MAX as i128)
            .contains(&v)
            .then_some(Line(v))
    }

    /// The value as the file holds it.
    pub fn value(self) -> i128 {
        self.0
    }

    /// The line as a signed number, `None` beyond `i64::MAX` (the unwinder's unknown).
    pub fn known(self) -> Option<i64> {
        i64::try_from(self.0).ok()
    }
}

impl From<i64> for Line {
    fn from(v: i64) -> Line {
        Line(v as i128)
    }
}

/// The number, or `?` for a line beyond `i64::MAX` (no source line).
impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.known() {
            Some(v) => write!(f, "{v}"),
            None => f.write_str("?"),
        }
    }
}

/// As a signed integer where it fits, else as an unsigned one (so every format that
/// carries 64-bit integers carries it).
impl Serialize for Line {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.known() {
            Some(v) => s.serialize_i64(v),
            None => s.serialize_u64(self.0 as u64),
        }
    }
}

impl<'de> Deserialize<'de> for Line {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Line, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Line;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a line number in the signed or unsigned 64-bit range")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Line, E> {
                Ok(Line::from(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Line, E> {
                Ok(Line(v as i128))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Line, E> {
                Line::new(v).ok_or_else(|| E::custom("line number out of range"))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Line, E> {
                i128::try_from(v)
                    .ok()
                    .and_then(Line::new)
                    .ok_or_else(|| E::custom("line number out of range"))
            }
        }
        d.deserialize_any(V)
    }
}
