//! A memory limit judged on each device's figure, in words: the message of a test that
//! asserts a device's memory stays under a limit (Python's
//! `leakscope.testing.assert_memory_below`), worded and sized as every output is.

use super::bytes_exact;
use crate::budget::gate::memory_measure;

/// Why `figures` (device, bytes of `measure`) fail a limit of `limit` bytes, or `None`
/// when every device holds: the measure, what it measures, the limit and each device over
/// it.
///
/// ```
/// use leakscope::render::memory_limit::failure;
/// assert_eq!(failure(&[(0, 1024)], "peak_requested", 1024), None);
/// let message = failure(&[(0, 1024), (1, 2048)], "end_reserved", 1024).unwrap();
/// assert!(message.ends_with("(1,024 B):\n  device 1: 2.00 KiB (2,048 B)"));
/// ```
pub fn failure(figures: &[(i64, u64)], measure: &str, limit: u64) -> Option<String> {
    let over: Vec<String> = figures
        .iter()
        .filter(|&&(_, bytes)| bytes > limit)
        .map(|&(device, bytes)| format!("  device {device}: {}", bytes_exact(bytes)))
        .collect();
    if over.is_empty() {
        return None;
    }
    let what = memory_measure(measure).map_or(String::new(), |m| format!(" ({})", m.meaning));
    Some(format!(
        "leakscope: {measure}{what} is over the limit of {}:\n{}",
        bytes_exact(limit),
        over.join("\n")
    ))
}
