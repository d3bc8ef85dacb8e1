//! What the Perfetto and pprof exports wrote, for the terminal: the file, its size and
//! what it holds, and what was left out.

use std::fmt::Write;

use super::{PerfettoSummary, PprofSummary};
use crate::render::{bytes, count, terminal_text};

/// The trace file, its time axis, its tracks' contents, and the inputs not read.
pub fn perfetto(s: &PerfettoSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}: Perfetto trace, {} ({} files, {} devices; time axis: {})",
        terminal_text(&s.out),
        bytes(s.file_bytes),
        count(s.files_read),
        count(s.devices),
        s.timebase,
    );
    let _ = writeln!(
        o,
        "  {} counter points, {} slices, {} instants (peak, OOM, leak onsets)",
        count(s.counter_points),
        count(s.slices),
        count(s.instants)
    );
    if s.windows_merged > 0 {
        let _ = writeln!(
            o,
            "  {} windows drawn together with their neighbours (over the slice budget)",
            count(s.windows_merged)
        );
    }
    if s.ranges_left_out > 0 {
        let _ = writeln!(
            o,
            "  {} of the shortest record_function ranges left out (over the slice budget)",
            count(s.ranges_left_out)
        );
    }
    for f in &s.failed {
        let _ = writeln!(
            o,
            "  not read: {}: {}",
            terminal_text(&f.file),
            terminal_text(&f.error)
        );
    }
    let _ = writeln!(o, "  open it at https://ui.perfetto.dev (Open trace file)");
    o
}

/// The profile file, what its values are and their total, and the devices left out.
pub fn pprof(s: &PprofSummary) -> String {
    let mut o = String::new();
    let what = if s.profile == "growth" {
        format!(
            "survivor bytes per window by stack; total {} per window",
            bytes(s.total)
        )
    } else {
        format!("live bytes by stack; total {}", bytes(s.total))
    };
    let _ = writeln!(
        o,
        "{}: pprof profile of {}, {} ({}; {} samples, devices {})",
        terminal_text(&s.out),
        terminal_text(&s.file),
        bytes(s.file_bytes),
        what,
        count(s.samples),
        crate::render::device_list(&s.devices),
    );
    for l in &s.left_out {
        let _ = writeln!(o, "  left out: {}", terminal_text(l));
    }
    let _ = writeln!(
        o,
        "  open it with `go tool pprof -http=: {}` or at https://www.speedscope.app",
        terminal_text(&s.out)
    );
    o
}
