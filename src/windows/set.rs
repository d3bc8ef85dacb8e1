//! The windows of one device: where each starts and ends, where they came from, and the
//! window an event falls in.

use serde::Serialize;

use super::quality::Quality;

/// A family of windows `auto` weighed, with its figures.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    /// `annotation`, `metadata`, `frame` (entries into a function) or `site` (the
    /// allocations of one call site).
    pub source: String,
    /// The annotation family, the function (as a `--windows frame:` pattern), the site.
    pub detail: String,
    /// The `--windows` value that gives these windows.
    pub spec: String,
    /// Its figures, and what it fails.
    pub quality: Quality,
}

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
    /// The `--windows` value that gives these windows again (none for the whole trace).
    pub spec: Option<String>,
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
    /// Whether the windows are units of work to judge growth across. False when the
    /// whole trace is one window because nothing qualified (or the spec found nothing):
    /// the leak finder then gives no per-window verdicts.
    pub verdicts: bool,
    /// The windows' figures (absent for the whole trace): an explicit `--windows` that
    /// fails them is used anyway, and the failures are reported.
    pub quality: Option<Quality>,
    /// What `auto` weighed, most windows first: each candidate family's figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
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
