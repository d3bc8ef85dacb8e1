//! `LEAKSCOPE_TIMINGS=1`: load and total times on standard error, so the cost of an
//! analysis can be told from the cost of reading the file.

/// Seconds spent loading (added to by every load of the command).
pub static LOAD_SECONDS: std::sync::Mutex<f64> = std::sync::Mutex::new(0.0);

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

/// The process's peak resident memory (`VmHWM`, Linux), for the timings line. Unlike
/// `getrusage`, it counts this program's memory only, not its parent's before `exec`.
fn peak_rss() -> String {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return String::new();
    };
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .map(|kib| format!(", peak RSS {kib} KiB"))
        .unwrap_or_default()
}

/// With `LEAKSCOPE_TIMINGS=1`, prints the load and total times (and the peak resident
/// memory) on standard error.
pub fn timings(started: std::time::Instant) {
    if std::env::var_os("LEAKSCOPE_TIMINGS").is_some_and(|v| v == "1") {
        let load = LOAD_SECONDS.lock().map(|s| *s).unwrap_or(0.0);
        let total = started.elapsed().as_secs_f64();
        eprintln!(
            "leakscope timings: load {load:.3} s, analysis and output {:.3} s, total {total:.3} s{}{}",
            total - load,
            main_thread_schedstat(),
            peak_rss()
        );
    }
}
