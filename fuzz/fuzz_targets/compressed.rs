//! Compressed input: decompression beside the parse. Inputs that start with gzip's or
//! zstd's magic (the seeds: compressed fixtures, and what the fuzzer makes of them) are
//! loaded as they are; any other input is a pickle body (a PROTO header put in front when
//! it lacks one) compressed here, by gzip or zstd by its first byte, and cut short when
//! its second byte says so, so that the parser and the decoder meet every kind of end.
#![no_main]
use std::io::Write;

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    if data.starts_with(&[0x1f, 0x8b]) || data.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        common::load(data);
        return;
    }
    let Some((&how, body)) = data.split_first() else {
        return;
    };
    let mut pickle = Vec::with_capacity(body.len() + 2);
    if body.first() != Some(&0x80) {
        pickle.extend_from_slice(b"\x80\x04");
    }
    pickle.extend_from_slice(body);
    let mut packed = if how & 1 == 0 {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let _ = gz.write_all(&pickle);
        gz.finish().unwrap_or_default()
    } else {
        zstd::bulk::compress(&pickle, 1).unwrap_or_default()
    };
    if how & 2 != 0 {
        // Cut at a point the byte chooses.
        let keep = packed.len() * usize::from(how >> 2) / 64;
        packed.truncate(keep.max(1));
    }
    common::load(&packed);
});
