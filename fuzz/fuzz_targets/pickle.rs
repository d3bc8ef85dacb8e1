//! The pickle reader on arbitrary opcode streams (a PROTO header is put in front of
//! inputs that lack one, so the sniffer always hands the bytes to the pickle reader).
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::load_behind(data, data.first() == Some(&0x80), b"\x80\x04");
});
