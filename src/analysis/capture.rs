//! Capture advice: when a trace cannot show growth (too few windows, or the ring buffer
//! kept only its end), how to capture one that can: the `max_entries` that holds enough
//! windows at the trace's own rate of events, or a series of state-only snapshots, one
//! per step, which costs a fraction of a millisecond each.

use serde::Serialize;

use crate::windows::{EVIDENCE, Windows};

/// Fewer windows than this are too few to judge growth: a leak needs growth in most
/// windows, and one window of growth is warm-up.
pub const TOO_FEW_WINDOWS: usize = 3;

/// Why the capture falls short.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Shortfall {
    /// Units of work were found, but fewer than [`TOO_FEW_WINDOWS`].
    TooFewWindows,
    /// The ring buffer wrapped (or recording started late): the trace misses its start
    /// and holds fewer windows than a late leak needs ([`EVIDENCE`]).
    Wrapped,
    /// No repeated unit of work was found in the trace.
    NoUnit,
    /// The file holds state only (no trace): one file shows no change; a series does.
    NoTrace,
}

/// How to capture a trace that shows growth.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureAdvice {
    /// What falls short.
    pub shortfall: Shortfall,
    /// Trace events per window at this trace's rate (`None` without units of work).
    pub events_per_window: Option<u64>,
    /// Windows the advised capture would hold ([`EVIDENCE`]: enough for a late leak).
    pub windows_wanted: u64,
    /// `max_entries` for `_record_memory_history` that holds `windows_wanted` windows at
    /// this rate, rounded up to two significant digits (`None` without a rate).
    pub max_entries: Option<u64>,
}

/// Advice for one device's trace cut into `windows`; `None` when the trace can show
/// growth (or is a series of snapshots, whose remedy is more files).
pub fn advice(windows: &Windows, wrapped: bool) -> Option<CaptureAdvice> {
    if windows.is_series() {
        return None;
    }
    let n = windows.len();
    let shortfall = if windows.events == 0 {
        Shortfall::NoTrace
    } else if !windows.verdicts {
        Shortfall::NoUnit
    } else if n < TOO_FEW_WINDOWS {
        Shortfall::TooFewWindows
    } else if wrapped && n < EVIDENCE {
        Shortfall::Wrapped
    } else {
        return None;
    };
    // The rate: events from the first window's start to the end, per window.
    let events_per_window = (windows.verdicts && n > 0).then(|| {
        let span = u64::from(windows.events.saturating_sub(windows.starts[0]));
        span.div_ceil(n as u64)
    });
    let wanted = EVIDENCE as u64;
    Some(CaptureAdvice {
        shortfall,
        events_per_window,
        windows_wanted: wanted,
        max_entries: events_per_window
            .filter(|&e| e > 0)
            .map(|e| two_digits_up(e.saturating_mul(wanted))),
    })
}

/// `x` rounded up to two significant digits (183,472 → 190,000).
fn two_digits_up(x: u64) -> u64 {
    let mut unit = 1u64;
    while x / unit >= 100 {
        unit = unit.saturating_mul(10);
    }
    x.div_ceil(unit).saturating_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::two_digits_up;

    #[test]
    fn rounds_up_to_two_digits() {
        assert_eq!(two_digits_up(183_472), 190_000);
        assert_eq!(two_digits_up(99), 99);
        assert_eq!(two_digits_up(100), 100);
        assert_eq!(two_digits_up(101), 110);
        assert_eq!(two_digits_up(1), 1);
    }
}
