//! leakscope's MessagePack cache: the magic and version are put in front, so every input
//! reaches the MessagePack decoder and the model checks after it.
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    use leakscope::load::cache::{MAGIC, VERSION};
    let mut prefix = MAGIC.to_vec();
    prefix.push(VERSION);
    common::load_behind(data, data.starts_with(MAGIC), &prefix);
});
