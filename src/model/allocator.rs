//! What the file says about its caching allocator: the memory pools segments belong to
//! and the settings it ran with (`allocator_settings`, `PYTORCH_CUDA_ALLOC_CONF`).

use std::fmt;

use serde::Serialize;

use super::{Segment, Snapshot, Value};

/// A memory pool: `segment_pool_id`. `(0, 0)` is the default pool; a CUDA graph's pool or
/// a `torch.cuda.MemPool` is private: its free memory serves only its own allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolId(pub i64, pub i64);

impl PoolId {
    /// The default pool.
    pub const DEFAULT: PoolId = PoolId(0, 0);

    /// Reads a pool id (a 2-tuple, or a 2-list once the file went through JSON); anything
    /// else is the default pool.
    pub fn read(v: Option<&Value>) -> PoolId {
        let items = match v {
            Some(Value::Tuple(t) | Value::List(t)) if t.len() == 2 => t,
            _ => return PoolId::DEFAULT,
        };
        match (items[0].as_i64(), items[1].as_i64()) {
            (Some(a), Some(b)) => PoolId(a, b),
            _ => PoolId::DEFAULT,
        }
    }

    /// Whether the pool is private (not the default pool).
    pub fn is_private(self) -> bool {
        self != PoolId::DEFAULT
    }
}

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.0, self.1)
    }
}

impl Serialize for PoolId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        [self.0, self.1].serialize(s)
    }
}

impl Segment {
    /// The segment's pool.
    pub fn pool(&self) -> PoolId {
        PoolId::read(self.pool_id.as_ref())
    }
}

/// The allocator settings a file recorded: the `allocator_settings` dict (CUDA ≥ 2.3),
/// with the environment variable's text filling what the dict lacks.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AllocatorSettings {
    /// The environment variable that configures this producer's allocator.
    pub variable: &'static str,
    /// Its value as recorded (`None`: not recorded or empty).
    pub conf: Option<String>,
    /// `expandable_segments` (`None`: the file does not say).
    pub expandable_segments: Option<bool>,
    /// `max_split_size` in bytes (`None`: unlimited or not said).
    pub max_split_size_bytes: Option<u64>,
    /// `garbage_collection_threshold` (`None`: off or not said).
    pub garbage_collection_threshold: Option<f64>,
    /// Whether any segment is expandable (the settings' effect, seen in the segments).
    pub expandable_seen: bool,
}

impl AllocatorSettings {
    /// The settings of `snap` (`npu`: a torch_npu file, whose variable is
    /// `PYTORCH_NPU_ALLOC_CONF`).
    pub fn read(snap: &Snapshot, npu: bool) -> AllocatorSettings {
        let variable = if npu {
            "PYTORCH_NPU_ALLOC_CONF"
        } else {
            "PYTORCH_CUDA_ALLOC_CONF"
        };
        let mut s = AllocatorSettings {
            variable,
            expandable_seen: snap.segments.iter().any(|g| g.is_expandable == Some(true)),
            ..AllocatorSettings::default()
        };
        let dict = snap.allocator_settings.as_ref();
        let get = |k: &str| dict.and_then(|d| d.get(k));
        s.conf = ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF"]
            .iter()
            .find_map(|k| get(k).and_then(Value::as_str))
            .filter(|c| !c.trim().is_empty())
            .map(str::to_string);
        s.expandable_segments = get("expandable_segments").and_then(Value::as_bool);
        s.max_split_size_bytes = get("max_split_size")
            .and_then(Value::as_i64)
            .and_then(|v| u64::try_from(v).ok())
            .filter(|&v| v > 0 && v < u64::MAX / 2);
        s.garbage_collection_threshold = match get("garbage_collection_threshold") {
            Some(Value::Float(f)) if *f > 0.0 => Some(*f),
            _ => None,
        };
        if let Some(conf) = s.conf.clone() {
            s.fill_from_conf(&conf);
        }
        s
    }

    /// Fills what the dict did not say from `key:value,key:value` text.
    fn fill_from_conf(&mut self, conf: &str) {
        for item in conf.split(',') {
            let Some((k, v)) = item.split_once(':') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            match k {
                "expandable_segments" if self.expandable_segments.is_none() => {
                    self.expandable_segments = Some(v.eq_ignore_ascii_case("true"));
                }
                "max_split_size_mb" if self.max_split_size_bytes.is_none() => {
                    self.max_split_size_bytes = v.parse::<u64>().ok().map(|mb| mb << 20);
                }
                "garbage_collection_threshold" if self.garbage_collection_threshold.is_none() => {
                    self.garbage_collection_threshold = v.parse::<f64>().ok().filter(|t| *t > 0.0);
                }
                _ => {}
            }
        }
    }

    /// Whether expandable segments are on: said by the settings, else seen in segments.
    pub fn expandable(&self) -> bool {
        self.expandable_segments.unwrap_or(self.expandable_seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_fills_what_the_dict_lacks() {
        let mut s = AllocatorSettings::default();
        s.fill_from_conf("expandable_segments:True, max_split_size_mb:128");
        assert_eq!(s.expandable_segments, Some(true));
        assert_eq!(s.max_split_size_bytes, Some(128 * 1024 * 1024));
        assert!(s.expandable());
    }

    #[test]
    fn pool_ids_read_tuples_and_lists() {
        let t = Value::Tuple(vec![Value::Int(0), Value::Int(1)]);
        assert_eq!(PoolId::read(Some(&t)), PoolId(0, 1));
        assert!(PoolId::read(Some(&t)).is_private());
        assert_eq!(PoolId::read(None), PoolId::DEFAULT);
        assert_eq!(PoolId(0, 1).to_string(), "(0, 1)");
    }
}
