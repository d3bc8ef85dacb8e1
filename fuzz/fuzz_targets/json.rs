//! The JSON reader: inputs are made to start with `{` so the sniffer picks JSON.
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::load_behind(data, data.first() == Some(&b'{'), b"{");
});
