//! leakscope's own cache format: the model in MessagePack behind a magic header, so a
//! large pickle is parsed once and reloaded fast. Its contents are validated on read
//! like any other untrusted input.

use crate::error::{LoadErrorKind, WriteError};
use crate::model::Snapshot;

/// First bytes of a cache file; the byte after the text is the format version.
pub const MAGIC: &[u8] = b"LEAKSCOPE-MODEL\0";
/// Bump when the model's serialized shape changes.
pub const VERSION: u8 = 2;

/// Encodes a snapshot as a cache file image.
pub fn encode(snap: &Snapshot) -> Result<Vec<u8>, WriteError> {
    let mut out = Vec::from(MAGIC);
    out.push(VERSION);
    rmp_serde::encode::write(&mut out, snap).map_err(|e| WriteError::Encode {
        what: "the model as MessagePack",
        message: e.to_string(),
    })?;
    Ok(out)
}

/// Decodes a cache file image.
pub(crate) fn decode(data: &[u8]) -> Result<Snapshot, LoadErrorKind> {
    let body = data
        .strip_prefix(MAGIC)
        .ok_or_else(|| LoadErrorKind::Cache("missing header".into()))?;
    let (&version, body) = body.split_first().ok_or(LoadErrorKind::Truncated {
        offset: data.len() as u64,
        what: "the cache version",
    })?;
    if version != VERSION {
        return Err(LoadErrorKind::Cache(format!(
            "version {version}, this leakscope reads version {VERSION}; convert the original file again"
        )));
    }
    let mut snap: Snapshot = rmp_serde::from_slice(body)
        .map_err(|e| LoadErrorKind::Cache(format!("{e} (the file is truncated or corrupt)")))?;
    snap.validate()
        .map_err(|e| LoadErrorKind::Cache(e.to_string()))?;
    snap.rebuild_indexes();
    snap.format.container = crate::model::Container::Msgpack;
    Ok(snap)
}
