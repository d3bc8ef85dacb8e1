//! Where the command line's results go, and how files come in: a progress bar while a
//! large file loads, the loader's warnings, reports as text or JSON on standard output,
//! files written with their path in the error.

use std::io::{IsTerminal, Write};
use std::path::Path;

use crate::LoadOptions;
use crate::files::Inputs;
use crate::session::Session;
use anyhow::Context;

use super::args::LoadArgs;

/// Files larger than this get a progress bar (when standard error is a terminal).
const PROGRESS_THRESHOLD: u64 = 64 << 20;

/// A session a command opened: its own, or one a long-lived host keeps between commands
/// ([`super::kept`], the MCP server's).
pub enum Opened {
    /// Loaded for this command.
    Own(Box<Session>),
    /// Kept by the host.
    Kept(std::sync::Arc<Session>),
}

impl std::ops::Deref for Opened {
    type Target = Session;

    fn deref(&self) -> &Session {
        match self {
            Opened::Own(s) => s,
            Opened::Kept(s) => s,
        }
    }
}

impl Opened {
    /// Done with it: an own session is left to the operating system
    /// ([`keep_until_exit`]), a kept one stays with its host.
    pub fn release(self) {
        match self {
            Opened::Own(s) => keep_until_exit(s),
            Opened::Kept(s) => drop(s),
        }
    }
}

std::thread_local! {
    /// Standard output of the command running on this thread, when a host takes it.
    static CAPTURED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` (a command) with what it writes to standard output taken, and returns both.
pub fn captured<R>(f: impl FnOnce() -> R) -> (R, String) {
    CAPTURED.with(|c| *c.borrow_mut() = Some(String::new()));
    let r = f();
    let out = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (r, out)
}

fn progress_bar(path: &Path) -> Option<indicatif::ProgressBar> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    (size > PROGRESS_THRESHOLD && std::io::stderr().is_terminal()).then(|| {
        let pb = indicatif::ProgressBar::new(size);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        pb.set_message(format!("loading {}", path.display()));
        pb
    })
}

/// Loads `path` into a session, with a progress bar on long loads; the loader's warnings
/// go to standard error unless `quiet` (`summary` prints them itself).
pub fn open(path: &Path, args: &LoadArgs, quiet: bool) -> anyhow::Result<Opened> {
    if let Some(kept) = super::kept::sessions() {
        return kept.open(path, |p| load(p, args, quiet)).map(Opened::Kept);
    }
    load(path, args, quiet).map(|s| Opened::Own(Box::new(s)))
}

/// Loads one file with a progress bar when it is large and standard error a terminal,
/// and says the loader's warnings (unless `quiet`).
pub fn load(path: &Path, args: &LoadArgs, quiet: bool) -> anyhow::Result<Session> {
    let started = std::time::Instant::now();
    let bar = progress_bar(path);
    let mut tick = |done: u64, total: u64| {
        if let Some(pb) = &bar {
            pb.set_length(total);
            pb.set_position(done);
        }
    };
    let mut opts = LoadOptions::default();
    opts.max_decompressed_bytes = args.max_decompressed_bytes;
    opts.progress = Some(&mut tick);
    let session = Session::open(path, opts);
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    if let Ok(mut s) = super::timings::LOAD_SECONDS.lock() {
        *s += started.elapsed().as_secs_f64();
    }
    let session = session?;
    if !quiet {
        for w in &session.snapshot().warnings {
            eprintln!(
                "leakscope: warning: {}: {}",
                crate::render::terminal_text(&path.display().to_string()),
                crate::render::terminal_text(w)
            );
        }
    }
    Ok(session)
}

/// Opens what a command was given: one file, or a series (several files in step order,
/// or a run directory's files of one rank), with a progress bar over the files when
/// standard error is a terminal.
pub fn open_any(
    paths: &[std::path::PathBuf],
    rank: Option<u64>,
    args: &LoadArgs,
) -> anyhow::Result<Opened> {
    let files = match paths {
        [one] if !one.is_dir() => return open(one, args, false),
        [dir] => crate::session::series_files(dir, rank)?,
        many => many.to_vec(),
    };
    let started = std::time::Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| {
        let pb = indicatif::ProgressBar::new(files.len() as u64);
        pb.set_message("reading the series");
        pb
    });
    let tick = |done: usize, _total: usize| {
        if let Some(pb) = &bar {
            pb.set_position(done as u64);
        }
    };
    let mut opts = crate::session::SeriesOptions::default();
    opts.max_decompressed_bytes = args.max_decompressed_bytes;
    opts.progress = Some(&tick);
    let session = Session::open_series(&files, opts);
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    if let Ok(mut s) = super::timings::LOAD_SECONDS.lock() {
        *s += started.elapsed().as_secs_f64();
    }
    let session = session?;
    for w in &session.snapshot().warnings {
        eprintln!("leakscope: warning: {}", crate::render::terminal_text(w));
    }
    Ok(Opened::Own(Box::new(session)))
}

/// Says once per device what did not add up in the devices the command replayed, then
/// leaves the session to the operating system (see [`keep_until_exit`]).
pub fn finish(session: Opened) {
    warn_disagreements(&session);
    session.release();
}

/// One line on standard error per device whose trace and final state disagree.
pub fn warn_disagreements(session: &Session) {
    for c in session.disagreements() {
        eprintln!(
            "leakscope: warning: {}: {}",
            session.name(),
            crate::render::consistency::line(&c)
        );
    }
}

/// Leaves what a command built to the operating system: the process ends right after it,
/// and freeing a loaded snapshot's many small allocations one by one took milliseconds
/// (about 1% of `summary` on a 500 MB file) that the exit does not need.
pub fn keep_until_exit<T>(v: T) {
    std::mem::forget(v);
}

/// Set when an output file goes to standard output: the command's own text then goes to
/// standard error.
static TEXT_TO_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sends what [`stdout`] prints to standard error from now on (standard output holds an
/// output file).
pub fn print_to_stderr() {
    TEXT_TO_STDERR.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Writes `text` to standard output (standard error when an output file is there); a
/// closed pipe (`| head`) is not an error.
pub fn stdout(text: &str) -> anyhow::Result<()> {
    let taken = CAPTURED.with(|c| match c.borrow_mut().as_mut() {
        Some(buf) => {
            buf.push_str(text);
            true
        }
        None => false,
    });
    if taken {
        return Ok(());
    }
    if TEXT_TO_STDERR.load(std::sync::atomic::Ordering::Relaxed) {
        eprint!("{text}");
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to standard output"),
    }
}

/// Prints `report` as pretty JSON, or the text `render` makes of it.
pub fn emit<T: serde::Serialize>(
    json: bool,
    report: &T,
    render: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    if json {
        stdout(&crate::render::json::pretty(report)?)
    } else {
        stdout(&render(report))
    }
}

/// Like [`emit`], with the JSON on one line: for reports that are mostly long series
/// of numbers (`timeline`), read by programs rather than people.
pub fn emit_compact<T: serde::Serialize>(
    json: bool,
    report: &T,
    render: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    if json {
        return stdout(&(serde_json::to_string(report)? + "\n"));
    }
    emit(false, report, render)
}

/// Writes `data` to `path` whole (see [`crate::files`]), refusing a path that names one
/// of `inputs`.
pub fn file(inputs: &Inputs, path: &Path, data: &[u8]) -> anyhow::Result<()> {
    crate::files::write_whole(inputs, path, data)?;
    Ok(())
}

/// Reads a text file the options name (a budget, a baseline), with the library's limit.
pub fn read_text(path: &Path, what: &str) -> anyhow::Result<String> {
    crate::files::read_small_text(path).map_err(|e| {
        super::exit::Usage(format!("cannot read the {what} {}: {e}", path.display())).into()
    })
}
