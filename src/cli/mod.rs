//! The binary's parts: argument definitions, one function per command, output and input
//! helpers, the allocator hint, and what an error means for the exit code.

pub mod args;
pub mod commands;
pub mod huge_pages;
pub mod output;

use leakscope::budget::{BaselineError, BudgetError};
use leakscope::session::SessionError;
use leakscope::{LoadError, error::WriteError};

/// A request that does not fit the input or the options (exit 2, like clap's usage errors).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// `check` found a limit exceeded (exit 1; the report says which).
#[derive(Debug)]
pub struct OverBudget;

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("over budget")
    }
}

impl std::error::Error for OverBudget {}

/// 2 when the input or the options are at fault (the library's typed errors say so), 1
/// for anything else (an output that cannot be written, say).
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let input = e.downcast_ref::<SessionError>().is_some()
        || e.downcast_ref::<LoadError>().is_some()
        || e.downcast_ref::<BudgetError>().is_some()
        || e.downcast_ref::<BaselineError>().is_some()
        || e.downcast_ref::<Usage>().is_some();
    let ours = e.downcast_ref::<WriteError>().is_some();
    if input && !ours { 2 } else { 1 }
}

/// The main thread's time on a CPU and waiting for one (Linux schedstat), for the
/// timings line: a reader thread that waits for a CPU is a sign of oversubscribed cores.
fn main_thread_schedstat() -> String {
    let Ok(s) = std::fs::read_to_string("/proc/thread-self/schedstat") else {
        return String::new();
    };
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
    let (on, wait) = (f.next().unwrap_or(0), f.next().unwrap_or(0));
    format!(
        " (main thread on CPU {:.3} s, waiting for a CPU {:.3} s)",
        on as f64 / 1e9,
        wait as f64 / 1e9
    )
}

/// With `LEAKSCOPE_TIMINGS=1`, prints the load and total times on standard error.
pub fn timings(started: std::time::Instant) {
    if std::env::var_os("LEAKSCOPE_TIMINGS").is_some_and(|v| v == "1") {
        let load = output::LOAD_SECONDS.lock().map(|s| *s).unwrap_or(0.0);
        let total = started.elapsed().as_secs_f64();
        eprintln!(
            "leakscope timings: load {load:.3} s, analysis and output {:.3} s, total {total:.3} s{}",
            total - load,
            main_thread_schedstat()
        );
    }
}
