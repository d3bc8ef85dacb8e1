//! leakscope's MessagePack cache: the magic and version are put in front, so every input
//! reaches the MessagePack decoder and the model checks after it.
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    use leakscope::load::cache::{MAGIC, VERSION};
    if data.starts_with(MAGIC) {
        common::load(data);
    } else {
        let mut v = Vec::with_capacity(data.len() + MAGIC.len() + 1);
        v.extend_from_slice(MAGIC);
        v.push(VERSION);
        v.extend_from_slice(data);
        common::load(&v);
    }
});
