//! The pickle reader on arbitrary opcode streams (a PROTO header is put in front of
//! inputs that lack one, so the sniffer always hands the bytes to the pickle reader).
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    if data.first() == Some(&0x80) {
        common::load(data);
    } else {
        let mut v = Vec::with_capacity(data.len() + 2);
        v.extend_from_slice(b"\x80\x04");
        v.extend_from_slice(data);
        common::load(&v);
    }
});
