//! Load plus analysis: whatever loads must also summarize, replay, cut into `auto`
//! windows and go through the leak finder, `top` and the OOM explanation without a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

use leakscope::analysis::{leaks, oom, summary, top};
use leakscope::attribute::{Attributor, FilterOptions, GroupBy};
use leakscope::windows::{WindowSpec, windows};

mod common;

fuzz_target!(|data: &[u8]| {
    let Some(snap) = common::load(data) else {
        return;
    };
    let _ = summary::summarize(&snap, "fuzz");
    let Ok(spec) = WindowSpec::parse("auto") else {
        return;
    };
    for dev in snap.devices() {
        let rep = leakscope::replay::replay(&dev);
        let mut attr = Attributor::new(&snap, GroupBy::Site, &FilterOptions::default());
        let w = windows(&snap, dev.device, &spec, &attr);
        let report = leaks::leaks(&rep, &w, &mut attr, &leaks::LeakOptions::default());
        for at in [top::At::Peak, top::At::End] {
            if let Ok(p) = top::resolve(&snap, &rep, at) {
                let _ = top::top(&rep, p, &mut attr, 10);
            }
        }
        let _ = oom::explain(&snap, &dev, &rep, &mut attr, &report);
    }
});
