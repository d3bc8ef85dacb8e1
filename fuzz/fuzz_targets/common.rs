// Shared by the fuzz targets: load with the limits a fuzzer needs (one thread, a small
// decompression cap), so that what is measured is the reader, not the guard rails.
use leakscope::{LoadOptions, Snapshot, load_bytes};

pub fn load(data: &[u8]) -> Option<Snapshot> {
    let opts = LoadOptions {
        max_decompressed_bytes: 16 << 20,
        progress: None,
        threads: false,
    };
    load_bytes(data, opts).ok()
}
