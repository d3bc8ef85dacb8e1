//! The windows of one device: where each starts and ends, where they came from, and the
//! window an event falls in.

use serde::Serialize;

/// The windows of one device.
#[derive(Clone, Debug, Serialize)]
pub struct Windows {
    /// The device.
    pub device: i64,
    /// `annotation`, `metadata`, `frame`, `every` or `whole-trace`.
    pub source: String,
    /// What was matched, in words (the annotation pattern, the function, N).
    pub detail: String,
    /// Why this source was chosen (for `auto`) or how it was read.
    pub reason: String,
    /// The windows are `auto`'s guess from a repeating function (no annotations or
    /// metadata said what a step is): they may be layers rather than micro-batches.
    pub guessed: bool,
    /// Event index where each window starts, increasing.
    pub starts: Vec<u32>,
    /// Where each window ends (exclusive): the next start, or the end of a `--within`
    /// phase. Empty means "the next start, or the end of the trace".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ends: Vec<u32>,
    /// Events in the trace (the last window ends there).
    pub events: u32,
    /// A name per window (the annotation name, the metadata value), when there is one.
    pub names: Vec<String>,
}

impl Windows {
    /// Number of windows.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// True when there is no window.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Event range `[start, end)` of window `k`.
    pub fn range(&self, k: usize) -> (u32, u32) {
        let end = match self.ends.get(k) {
            Some(&e) => e,
            None => self.starts.get(k + 1).copied().unwrap_or(self.events),
        };
        (self.starts[k], end)
    }

    /// The window holding event `i` (`None` outside every window).
    pub fn of_event(&self, i: u32) -> Option<usize> {
        let k = match self.starts.binary_search(&i) {
            Ok(k) => k,
            Err(0) => return None,
            Err(k) => k - 1,
        };
        (i < self.range(k).1).then_some(k)
    }

    /// Keeps the windows that start inside one of `spans` (`[start, end)` event ranges),
    /// each cut at the end of its span: `--within` a phase of every step.
    pub fn restrict(&self, spans: &[(u32, u32)], what: &str) -> Windows {
        let mut w = Windows {
            starts: Vec::new(),
            ends: Vec::new(),
            names: Vec::new(),
            reason: format!("{}; within {what}", self.reason),
            ..self.clone()
        };
        for k in 0..self.len() {
            let (s, e) = self.range(k);
            if let Some(&(_, se)) = spans.iter().find(|(a, b)| *a <= s && s < *b) {
                w.starts.push(s);
                w.ends.push(e.min(se));
                w.names.push(self.names.get(k).cloned().unwrap_or_default());
            }
        }
        w
    }
}
