//! Load plus analysis: whatever loads must also go through the session's every report
//! (summary, leaks over `auto` windows, top and the call tree at the peak and the end,
//! the segment map, the OOM explanation, the HTML report's data, a comparison with
//! itself, the Perfetto timeline and both pprof profiles, encoded) on every device,
//! without a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

use leakscope::analysis::At;
use leakscope::session::{self, Options, ReportOptions, Session};

mod common;

fuzz_target!(|data: &[u8]| {
    let Some(snap) = common::load(data) else {
        return;
    };
    let s = Session::from_snapshot(snap, "fuzz");
    let opts = Options::default();
    let _ = s.summary();
    let _ = s.leaks(&opts);
    for at in [At::Peak, At::End] {
        let _ = s.top(&opts, at, 10);
        let _ = s.tree(&opts, at);
        let _ = s.segments(&opts, at);
    }
    let _ = s.oom(&opts);
    let _ = s.report(&opts, &ReportOptions::default());
    if let Ok(side) = s.compare_side(&opts) {
        let _ = session::compare(&side, &side);
    }
    if let Ok(t) = s.perfetto(&leakscope::export::PerfettoOptions::default()) {
        let _ = leakscope::export::encode::perfetto::write(&t, std::io::sink());
    }
    for growth in [false, true] {
        let mut p = leakscope::export::PprofOptions::default();
        p.growth = growth;
        if let Ok(profile) = s.pprof(&p) {
            let _ = leakscope::export::encode::pprof::write(&profile, std::io::sink());
        }
    }
});
