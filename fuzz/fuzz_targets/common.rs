// Shared by the fuzz targets: load with the limits a fuzzer needs (one thread, a small
// decompression cap), so that what is measured is the reader, not the guard rails.
use leakscope::{LoadOptions, Snapshot, load_bytes};

pub fn load(data: &[u8]) -> Option<Snapshot> {
    let mut opts = LoadOptions::default();
    opts.max_decompressed_bytes = 16 << 20;
    opts.threads = false;
    load_bytes(data, opts).ok()
}

/// Loads `data` as it is when `ready` (it already starts the way the target's reader
/// wants), else behind `prefix`, so that every input reaches that reader.
#[allow(dead_code)] // not every target needs it
pub fn load_behind(data: &[u8], ready: bool, prefix: &[u8]) -> Option<Snapshot> {
    if ready {
        return load(data);
    }
    let mut v = Vec::with_capacity(prefix.len() + data.len());
    v.extend_from_slice(prefix);
    v.extend_from_slice(data);
    load(&v)
}
