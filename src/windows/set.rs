//! The windows of one device: where each starts and ends, where they came from, and the
//! window an event falls in.

use serde::Serialize;

use super::quality::Quality;
use super::source::WindowSource;

/// A family of windows `auto` weighed, with its figures.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    /// `annotation`, `metadata`, `frame` (entries into a function) or `site` (the
    /// allocations of one call site).
    pub source: WindowSource,
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
    /// Where they come from.
    pub source: WindowSource,
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
    /// Whether these are a series of snapshots' windows (not cut from a trace).
    pub fn is_series(&self) -> bool {
        self.source == WindowSource::Snapshots
    }

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

    /// The window holding event `i` (`None` outside every window): the last that starts
    /// at or before it, if `i` comes before that window's end.
    pub fn of_event(&self, i: u32) -> Option<usize> {
        let k = self.at_or_before(i)?;
        (i < self.range(k).1).then_some(k)
    }

    /// The last window that starts at or before event `i`, even when `i` falls after its
    /// end (between two windows: a boundary's work belongs to the window before).
    pub fn at_or_before(&self, i: u32) -> Option<usize> {
        self.starts.partition_point(|&s| s <= i).checked_sub(1)
    }

    /// A [`WindowCursor`] over these windows, for events asked about in increasing order.
    pub fn cursor(&self) -> WindowCursor<'_> {
        WindowCursor {
            windows: self,
            at: 0,
        }
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

/// Answers [`Windows::of_event`] for events that come mostly in increasing order (the
/// lifetimes of a trace, by birth): each answer steps on from the last one's window, a
/// few windows at most, then searches only the starts after it; an event before the last
/// answer is searched for among all. The answers are `of_event`'s whatever the order.
pub struct WindowCursor<'w> {
    windows: &'w Windows,
    /// The last answer's window (0 before any).
    at: usize,
}

/// Windows stepped over before searching the rest.
const STEPS: usize = 4;

impl WindowCursor<'_> {
    /// The window holding event `i`, as [`Windows::of_event`] finds it.
    pub fn of_event(&mut self, i: u32) -> Option<usize> {
        let w = self.windows;
        let starts = &w.starts;
        if starts.get(self.at).is_none_or(|&s| i < s) {
            let k = w.of_event(i);
            if let Some(k) = k {
                self.at = k;
            }
            return k;
        }
        // starts[at] <= i: the window is the last start at or before i, from `at` on.
        let mut k = self.at;
        let mut steps = 0;
        while starts.get(k + 1).is_some_and(|&s| s <= i) {
            if steps == STEPS {
                k += starts[k + 1..].partition_point(|&s| s <= i);
                break;
            }
            k += 1;
            steps += 1;
        }
        self.at = k;
        (i < w.range(k).1).then_some(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(starts: Vec<u32>, ends: Vec<u32>, events: u32) -> Windows {
        Windows {
            device: 0,
            source: WindowSource::WholeTrace,
            detail: String::new(),
            reason: String::new(),
            spec: None,
            guessed: false,
            names: vec![String::new(); starts.len()],
            starts,
            ends,
            events,
            verdicts: true,
            quality: None,
            candidates: Vec::new(),
        }
    }

    /// The cursor answers as the search does, for events in order, backwards, jumping
    /// far ahead, in gaps between windows cut short, and before the first window.
    #[test]
    fn the_cursor_answers_as_the_search_does() {
        let cases = [
            windows(
                vec![5, 10, 20, 21, 40, 41, 42, 43, 44, 45, 60, 90],
                vec![],
                100,
            ),
            windows(vec![5, 10, 20, 40], vec![8, 15, 30, 50], 100),
            // Equal starts (an empty window before its twin).
            windows(vec![5, 5, 20, 20, 20, 60], vec![], 100),
            windows(vec![], vec![], 100),
            windows(vec![0], vec![], 100),
        ];
        let mut orders: Vec<Vec<u32>> = vec![(0..110).collect(), (0..110).rev().collect()];
        // A fixed scramble: ahead and back in steps of 37 modulo 110.
        orders.push((0..110).map(|k| (k * 37) % 110).collect());
        orders.push(vec![0, 99, 1, 98, 45, 44, 46, 10, 90, 91, 12]);
        for w in &cases {
            for order in &orders {
                let mut c = w.cursor();
                for &i in order {
                    assert_eq!(c.of_event(i), w.of_event(i), "event {i} of {:?}", w.starts);
                }
            }
        }
        // Where they hold an event, the windows are found by hand.
        let w = &cases[1];
        let mut c = w.cursor();
        let found: Vec<Option<usize>> = [4, 5, 8, 12, 16, 25, 35, 45, 99]
            .map(|i| c.of_event(i))
            .into();
        assert_eq!(
            found,
            [
                None,
                Some(0),
                None,
                Some(1),
                None,
                Some(2),
                None,
                Some(3),
                None
            ]
        );
    }
}
