//! Long traces scanned on another core while the parse goes on.
//!
//! When a pickle starts a new trace list, the one before it is most likely complete, and so
//! is a trace list placed into its parent list (`device_traces`). The builder lends such a
//! trace to a worker thread that computes its [`TraceScan`](crate::model::TraceScan) (what `summary`
//! needs from the events) and keeps it with the trace, so that pass costs nothing after
//! the load. A trace that gets more events after all is taken back first (the scan is then
//! dropped and computed again on use), so the result never depends on the guess.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use crate::model::Trace;

/// Traces shorter than this are scanned when first needed: lending them costs more than
/// the scan.
pub(crate) const MIN_EVENTS: usize = 100_000;

type Job = (usize, Trace, Vec<bool>);

/// The lending side.
pub(crate) struct ScanAhead {
    threaded: bool,
    tx: Option<Sender<Job>>,
    rx: Option<Receiver<(usize, Trace)>>,
    worker: Option<JoinHandle<()>>,
    /// Traces lent and not yet back.
    out: usize,
}

fn work(jobs: Receiver<Job>, done: Sender<(usize, Trace)>) {
    for (t, trace, timed) in jobs {
        // A scan that panicked would be a bug; the trace still goes back, without a scan.
        let scan =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| trace.compute_scan(&timed)));
        if let Ok(scan) = scan {
            trace.scan_cell.set(scan);
        }
        if done.send((t, trace)).is_err() {
            return;
        }
    }
}

impl ScanAhead {
    /// A lender; with `threaded` false it lends nothing.
    pub fn new(threaded: bool) -> Self {
        ScanAhead {
            threaded,
            tx: None,
            rx: None,
            worker: None,
            out: 0,
        }
    }

    /// Lends trace `t` (taken from `slot`) when it is long enough and a worker runs.
    /// `timed` says which metas carry `time_us`.
    pub fn lend(&mut self, t: usize, slot: &mut Option<Trace>, timed: impl FnOnce() -> Vec<bool>) {
        if !self.threaded || slot.as_ref().is_none_or(|tr| tr.len() < MIN_EVENTS) {
            return;
        }
        if self.worker.is_none() {
            let (tx, jobs) = channel();
            let (done, rx) = channel();
            let Ok(worker) = std::thread::Builder::new()
                .name("leakscope-scan".into())
                .spawn(move || work(jobs, done))
            else {
                self.threaded = false;
                return;
            };
            (self.tx, self.rx, self.worker) = (Some(tx), Some(rx), Some(worker));
        }
        let (Some(tx), Some(trace)) = (&self.tx, slot.take()) else {
            return;
        };
        match tx.send((t, trace, timed())) {
            Ok(()) => self.out += 1,
            // The worker is gone: the trace comes back in the error.
            Err(e) => *slot = Some(e.0.1),
        }
    }

    /// Waits until trace `t` is back in `traces` (with every trace lent before it).
    pub fn take_back(&mut self, t: usize, traces: &mut [Option<Trace>]) {
        while self.out > 0 && traces.get(t).is_some_and(Option::is_none) {
            if !self.receive_one(traces) {
                return;
            }
        }
    }

    fn receive_one(&mut self, traces: &mut [Option<Trace>]) -> bool {
        let Some(Ok((i, trace))) = self.rx.as_ref().map(Receiver::recv) else {
            // The worker cannot vanish with a trace (it catches panics), so this is not
            // reached; stop waiting rather than hang.
            self.out = 0;
            return false;
        };
        self.out -= 1;
        if let Some(slot) = traces.get_mut(i) {
            *slot = Some(trace);
        }
        true
    }
}

impl Drop for ScanAhead {
    fn drop(&mut self) {
        self.tx = None; // closes the job channel, so the worker ends
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
