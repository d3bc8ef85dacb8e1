//! A small owned value tree for the parts of a snapshot leakscope keeps without
//! interpreting them: `allocator_settings`, unknown keys, frame extras.

use serde::{Deserialize, Serialize};

/// A plain data value as found in a snapshot (pickle or JSON), kept for round trips.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Value {
    /// `None` / `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer that fits in 64 bits (signed).
    Int(i64),
    /// An integer in `2^63..2^64`.
    UInt(u64),
    /// An integer beyond 64 bits, in decimal.
    BigInt(String),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// Raw bytes (pickle `bytes`; never produced by PyTorch).
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Value>),
    /// A tuple (becomes a list in JSON).
    Tuple(Vec<Value>),
    /// A dict, in insertion order.
    Map(Vec<(Value, Value)>),
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        use Value::*;
        match (self, other) {
            (Null, Null) => true,
            (Bool(a), Bool(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (UInt(a), UInt(b)) => a == b,
            (BigInt(a), BigInt(b)) => a == b,
            // Bitwise, so that NaN round-trips compare equal.
            (Float(a), Float(b)) => a.to_bits() == b.to_bits(),
            (Str(a), Str(b)) => a == b,
            (Bytes(a), Bytes(b)) => a == b,
            (List(a), List(b)) | (Tuple(a), Tuple(b)) => a == b,
            (Map(a), Map(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

impl std::hash::Hash for Value {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Value::Null => {}
            Value::Bool(b) => b.hash(state),
            Value::Int(i) => i.hash(state),
            Value::UInt(u) => u.hash(state),
            Value::BigInt(s) | Value::Str(s) => s.hash(state),
            Value::Float(f) => f.to_bits().hash(state),
            Value::Bytes(b) => b.hash(state),
            Value::List(v) | Value::Tuple(v) => v.hash(state),
            Value::Map(m) => m.hash(state),
        }
    }
}

impl Value {
    /// Number of values in this one, itself included.
    pub fn node_count(&self) -> u64 {
        match self {
            Value::List(items) | Value::Tuple(items) => {
                1 + items.iter().map(Value::node_count).sum::<u64>()
            }
            Value::Map(items) => {
                1 + items
                    .iter()
                    .map(|(k, v)| k.node_count() + v.node_count())
                    .sum::<u64>()
            }
            _ => 1,
        }
    }

    /// The string, when this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, when this is one that fits in `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int(i) => Some(i),
            _ => None,
        }
    }

    /// The boolean, when this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// Looks up a string key in a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(m) => m
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// Converts to JSON: tuples become arrays, non-string keys their decimal or repr,
    /// big integers and non-finite floats strings (JSON has neither).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::UInt(u) => J::from(*u),
            Value::BigInt(s) => J::String(s.clone()),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(J::Number)
                .unwrap_or_else(|| J::String(f.to_string())),
            Value::Str(s) => J::String(s.clone()),
            Value::Bytes(b) => J::Array(b.iter().map(|x| J::from(*x)).collect()),
            Value::List(v) | Value::Tuple(v) => J::Array(v.iter().map(Value::to_json).collect()),
            Value::Map(m) => J::Object(
                m.iter()
                    .map(|(k, v)| (k.key_string(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// [`Value::to_json`], consuming the value (each part is freed once converted).
    pub fn into_json(self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Str(s) => J::String(s),
            Value::BigInt(s) => J::String(s),
            Value::List(v) | Value::Tuple(v) => {
                J::Array(v.into_iter().map(Value::into_json).collect())
            }
            Value::Map(m) => J::Object(
                m.into_iter()
                    .map(|(k, v)| (k.key_string(), v.into_json()))
                    .collect(),
            ),
            other => other.to_json(),
        }
    }

    /// The text a key becomes in JSON.
    pub fn key_string(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            Value::Int(i) => i.to_string(),
            Value::UInt(u) => u.to_string(),
            Value::BigInt(s) => s.clone(),
            Value::Bool(b) => if *b { "true" } else { "false" }.to_string(),
            Value::Null => "null".to_string(),
            other => other.to_json().to_string(),
        }
    }

    /// Converts from JSON (numbers that are integers stay integers).
    pub fn from_json(v: &serde_json::Value) -> Value {
        use serde_json::Value as J;
        match v {
            J::Null => Value::Null,
            J::Bool(b) => Value::Bool(*b),
            J::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Value::UInt(u)
                } else {
                    Value::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            J::String(s) => Value::Str(s.clone()),
            J::Array(a) => Value::List(a.iter().map(Value::from_json).collect()),
            J::Object(o) => Value::Map(
                o.iter()
                    .map(|(k, v)| (Value::Str(k.clone()), Value::from_json(v)))
                    .collect(),
            ),
        }
    }
}

/// Keys of a record that leakscope does not interpret, in file order.
pub type Extra = Vec<(String, Value)>;
