//! The JSON reader: inputs are made to start with `{` so the sniffer picks JSON.
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    if data.first() == Some(&b'{') {
        common::load(data);
    } else {
        let mut v = Vec::with_capacity(data.len() + 1);
        v.push(b'{');
        v.extend_from_slice(data);
        common::load(&v);
    }
});
