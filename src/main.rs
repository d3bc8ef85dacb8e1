//! The `leakscope` command line: a thin clap layer over the library.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use leakscope::analysis::top::{self, At};
use leakscope::analysis::{self, summary};
use leakscope::analysis::{check, compare, leaks, oom, ranks, segments, tree};
use leakscope::attribute::{Attributor, FilterOptions, GroupBy};
use leakscope::render::{self, Style};
use leakscope::windows::WindowSpec;
use leakscope::{LoadError, LoadOptions, Snapshot};
use regex::Regex;

mod huge_pages;

#[global_allocator]
static ALLOCATOR: huge_pages::HugePageHint = huge_pages::HugePageHint;

/// Reads PyTorch CUDA / torch_npu memory snapshots and says what holds GPU memory.
#[derive(Parser)]
#[command(name = "leakscope", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// What a snapshot holds: format, devices, segments, blocks, bytes, trace events
    Summary {
        /// Snapshot file (pickle, JSON or leakscope cache; plain, .gz or .zst)
        file: PathBuf,
        /// Print JSON (schema leakscope.summary/1) instead of a table
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// What holds memory at a point (end, peak, oom, an event, a time), by call site
    Top {
        /// Snapshot file
        file: PathBuf,
        #[command(flatten)]
        point: PointArgs,
        /// Rows to show (the rest is summed in one line)
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print JSON (schema leakscope.top/1)
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        attr: AttrArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// The call sites whose memory grows per window (micro-batch): leaks and retained memory
    Leaks {
        /// Snapshot file
        file: PathBuf,
        #[command(flatten)]
        win: WindowArgs,
        /// Windows at the start whose growth is warm-up
        #[arg(long, default_value_t = 0)]
        warmup: usize,
        /// Leave out sites growing by fewer bytes per window
        #[arg(long, default_value_t = 0)]
        min_bytes: u64,
        /// Print JSON (schema leakscope.leaks/1)
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        attr: AttrArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Two runs side by side: growth per site and end state (forward-only vs training, before vs after a fix)
    Compare {
        /// Run A (for example the forward-only run, or before a fix)
        a: PathBuf,
        /// Run B (for example the training run, or after a fix)
        b: PathBuf,
        #[command(flatten)]
        win: WindowArgs,
        /// Print JSON (schema leakscope.compare/1)
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        attr: AttrArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Why an allocation failed: the request, free memory and its fragmentation, holders, growth, advice
    Oom {
        /// Snapshot file (an OOM dump, or a snapshot taken at the failure)
        file: PathBuf,
        #[command(flatten)]
        win: WindowArgs,
        /// Print JSON (schema leakscope.oom/1)
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        attr: AttrArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// The segment map at a point: every segment, its blocks, free space inside and between them
    Segments {
        /// Snapshot file
        file: PathBuf,
        #[command(flatten)]
        point: PointArgs,
        /// Print JSON (schema leakscope.segments/1)
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// A whole run: every rank and step in a directory (verl, torch_npu layouts), outliers flagged
    Ranks {
        /// Directory holding per-rank (and per-step) snapshots
        dir: PathBuf,
        /// auto, annotation[:REGEX], metadata, frame:REGEX or every:N
        #[arg(long, default_value = "auto")]
        windows: String,
        /// Print JSON (schema leakscope.ranks/1)
        #[arg(long)]
        json: bool,
    },
    /// CI memory gate: limits from a budget file (and a baseline); exit 1 when over budget
    Check {
        /// Snapshots to check
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Budget file (TOML; see docs/budget.md)
        #[arg(long)]
        budget: PathBuf,
        /// JSON of an earlier `check --json` or `leaks --json` to compare against
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// Windows (overrides the budget's [windows] spec)
        #[arg(long)]
        windows: Option<String>,
        /// Write JUnit XML here (a test case per limit)
        #[arg(long)]
        junit: Option<PathBuf>,
        /// Print JSON (schema leakscope.check/1)
        #[arg(long)]
        json: bool,
    },
    /// How the trace is cut into windows (micro-batches) for leaks, and why
    Windows {
        /// Snapshot file
        file: PathBuf,
        #[command(flatten)]
        win: WindowArgs,
        /// Print JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        attr: AttrArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// The call tree of the memory live at a point: bytes per frame, inclusive and self
    Tree {
        /// Snapshot file
        file: PathBuf,
        #[command(flatten)]
        point: PointArgs,
        /// Sum up nodes under this share of the tree's bytes in one line (0 shows every node)
        #[arg(long, default_value_t = render::tree::DEFAULT_MIN_SHARE)]
        min_share: f64,
        /// Print JSON (schema leakscope.tree/1)
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        attr: AttrArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// A flame graph of the memory live at a point (SVG, or folded stacks with --folded)
    Flamegraph {
        /// Snapshot file
        file: PathBuf,
        #[command(flatten)]
        point: PointArgs,
        /// Output file (default: flamegraph.svg; with --folded, standard output)
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Write folded stacks (`outer;...;inner BYTES` lines) instead of an SVG
        #[arg(long)]
        folded: bool,
        #[command(flatten)]
        attr: AttrArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// A self-contained HTML report (charts, tables, flamegraph) that opens offline
    Report {
        /// Snapshot file
        file: PathBuf,
        /// Output file
        #[arg(short, long, default_value = "leakscope-report.html")]
        output: PathBuf,
        #[command(flatten)]
        win: WindowArgs,
        /// Print the report's data as JSON (schema leakscope.report/1) instead of writing HTML
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        attr: AttrArgs,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Convert a snapshot to leakscope's MessagePack cache (.msgpack) or to JSON (.json)
    Convert {
        /// Input snapshot
        input: PathBuf,
        /// Output file: `.msgpack` writes the cache, `.json` snapshot-shaped JSON
        output: PathBuf,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Print shell completions (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
}

#[derive(clap::Args)]
struct PointArgs {
    /// Where: end, peak, oom, event:N (after event N) or time:US (after the last event at or before US)
    #[arg(long, default_value = "end")]
    at: String,
    /// Device index (default: the one with the longest trace)
    #[arg(long)]
    device: Option<i64>,
}

#[derive(clap::Args)]
struct WindowArgs {
    /// auto, annotation[:REGEX], metadata, frame:REGEX or every:N
    #[arg(long, default_value = "auto")]
    windows: String,
    /// Only this phase of each step: annotation:REGEX (START to END of matching annotations)
    #[arg(long)]
    within: Option<String>,
    /// Device index (default: the one with the longest trace)
    #[arg(long)]
    device: Option<i64>,
}

#[derive(clap::Args)]
struct AttrArgs {
    /// Group by site (innermost Python frame; the default), user (first frame of your code),
    /// stack, file or function. Not for tree and flamegraph, which show whole stacks
    #[arg(long)]
    by: Option<String>,
    /// Hide frames whose file:line:function matches this regex
    #[arg(long)]
    exclude: Option<String>,
    /// Count only allocations with a frame whose file:line:function matches this regex
    #[arg(long)]
    focus: Option<String>,
    /// Drop C++ frames
    #[arg(long)]
    python_only: bool,
    /// Keep the interpreter and dispatcher frames PyTorch's viewer hides
    #[arg(long)]
    keep_internal: bool,
    /// Frames of your own code (for --by user), as a regex on file:line:function
    #[arg(long)]
    user_code: Option<String>,
}

impl AttrArgs {
    fn options(&self) -> anyhow::Result<(GroupBy, FilterOptions)> {
        let name = self.by.as_deref().unwrap_or("site");
        let by = GroupBy::parse(name).ok_or_else(|| {
            Usage(format!(
                "--by {name}: use site, user, stack, file or function"
            ))
        })?;
        let re = |s: &Option<String>, flag: &str| -> anyhow::Result<Option<Regex>> {
            s.as_deref()
                .map(|r| {
                    Regex::new(r).map_err(|e| Usage(format!("{flag}: invalid regex: {e}")).into())
                })
                .transpose()
        };
        Ok((
            by,
            FilterOptions {
                keep_internal: self.keep_internal,
                exclude: re(&self.exclude, "--exclude")?,
                focus: re(&self.focus, "--focus")?,
                python_only: self.python_only,
                user_code: re(&self.user_code, "--user-code")?,
            },
        ))
    }
}

/// The device to look at: the one asked for (which must exist), else the default.
fn pick_device(snap: &Snapshot, asked: Option<i64>) -> anyhow::Result<i64> {
    match asked {
        Some(d) if snap.device_indices().contains(&d) => Ok(d),
        Some(d) => Err(Usage(format!(
            "no device {d} in this snapshot (devices: {:?})",
            snap.device_indices()
        ))
        .into()),
        None => Ok(analysis::default_device(snap)),
    }
}

/// The device asked for, else the one with an OOM (else the default): where `oom` and
/// `report` look.
fn oom_or_picked_device(snap: &Snapshot, asked: Option<i64>) -> anyhow::Result<i64> {
    match asked {
        Some(_) => pick_device(snap, asked),
        None => Ok(oom::oom_device(snap)),
    }
}

/// The allocations live at a point, ready to attribute.
struct Live {
    snap: Snapshot,
    replay: leakscope::replay::Replay,
    point: top::Point,
    by: GroupBy,
    filters: FilterOptions,
}

/// One run through the leak finder, with what `compare` and `check` also need.
struct LeakRun {
    report: leaks::LeakReport,
    end: top::TopReport,
    backward: u64,
    peak: u64,
    end_allocated: u64,
    end_reserved: u64,
}

/// The windows of `--windows`, cut to `--within` when given.
fn windows_of(
    snap: &Snapshot,
    d: i64,
    win: &WindowArgs,
    attributor: &Attributor,
) -> anyhow::Result<leakscope::windows::Windows> {
    let spec = WindowSpec::parse(&win.windows).map_err(|e| Usage(format!("--windows {e}")))?;
    let w = leakscope::windows::windows(snap, d, &spec, attributor);
    Ok(match &win.within {
        None => w,
        Some(within) => {
            let re = within
                .strip_prefix("annotation:")
                .ok_or_else(|| Usage(format!("--within {within}: use annotation:REGEX")))?;
            let re = Regex::new(re).map_err(|e| Usage(format!("--within: invalid regex: {e}")))?;
            let spans = leakscope::windows::annotation_spans(snap, d, &re);
            if spans.is_empty() {
                return Err(Usage(format!(
                    "--within {within}: no matching annotation on device {d}"
                ))
                .into());
            }
            w.restrict(&spans, within)
        }
    })
}

/// With `last` set (the command loads nothing after this file), the snapshot is left to
/// the exit; otherwise it is freed, so that commands over many files hold one at a time.
fn leak_run(
    file: &Path,
    win: &WindowArgs,
    attr: &AttrArgs,
    la: &LoadArgs,
    opts: &leaks::LeakOptions,
    last: bool,
) -> anyhow::Result<LeakRun> {
    let (by, filters) = attr.options()?;
    let snap = load(file, la)?;
    let d = pick_device(&snap, win.device)?;
    let rep = replay_device(&snap, d);
    let mut attributor = Attributor::new(&snap, by, &filters);
    let w = windows_of(&snap, d, win, &attributor)?;
    let report = leaks::leaks(&rep, &w, &mut attributor, opts);
    let end_point = top::resolve(&snap, &rep, At::End).map_err(Usage)?;
    let end = top::top(&rep, end_point, &mut attributor, usize::MAX);
    let backward = compare::backward_bytes(&snap, d);
    let dev = device_view(&snap, d);
    let (end_allocated, end_reserved) = (dev.held_bytes(), dev.reserved_bytes());
    let peak = rep.peak().1;
    drop(attributor);
    if last {
        keep_until_exit((snap, rep));
    }
    Ok(LeakRun {
        report,
        end,
        backward,
        peak,
        end_allocated,
        end_reserved,
    })
}

/// Refuses `--by` where it would change nothing: a call tree keeps whole stacks.
fn whole_stacks(attr: &AttrArgs, command: &str) -> anyhow::Result<()> {
    match &attr.by {
        Some(by) => Err(Usage(format!(
            "--by {by}: {command} shows whole stacks, so it does not group; use top, leaks, compare or report to group by {by}"
        ))
        .into()),
        None => Ok(()),
    }
}

/// What `top`, `tree` and `flamegraph` share: the options checked, `--at` parsed, the file
/// loaded, the device picked and replayed, the point resolved.
fn live_at(file: &Path, point: &PointArgs, attr: &AttrArgs, la: &LoadArgs) -> anyhow::Result<Live> {
    let (by, filters) = attr.options()?;
    let at = At::parse(&point.at).map_err(|e| Usage(format!("--at {e}")))?;
    let snap = load(file, la)?;
    let d = pick_device(&snap, point.device)?;
    let replay = replay_device(&snap, d);
    let point = top::resolve(&snap, &replay, at).map_err(Usage)?;
    Ok(Live {
        snap,
        replay,
        point,
        by,
        filters,
    })
}

/// A call tree's report as compact JSON (pretty-printed, a tree nested as deep as its
/// stacks is mostly indentation). serde recurses once per tree level, a few hundred bytes
/// of stack each, so the work runs on a thread whose stack grows with the depth.
fn tree_json(report: &tree::TreeReport) -> anyhow::Result<String> {
    let depth = report.tree.depth() as usize;
    let stack = (8 << 20) + depth.saturating_mul(2 << 10);
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("tree-json".into())
            .stack_size(stack)
            .spawn_scoped(s, || serde_json::to_string(report))
            .context("cannot start a thread to write JSON")?
            .join()
            .map_err(|_| anyhow::anyhow!("writing JSON panicked"))?
            .context("cannot write JSON")
    })
}

fn write_file(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, data).with_context(|| format!("cannot write {}", path.display()))
}

/// The view of device `d`, which `pick_device` (or `oom_device`) returned.
fn device_view(snap: &Snapshot, d: i64) -> leakscope::model::DeviceView<'_> {
    snap.devices()
        .into_iter()
        .find(|v| v.device == d)
        .expect("devices come from the snapshot's own list")
}

fn replay_device(snap: &Snapshot, d: i64) -> leakscope::replay::Replay {
    leakscope::replay::replay(&device_view(snap, d))
}

#[derive(clap::Args)]
struct LoadArgs {
    /// Largest decompressed size accepted for .gz/.zst input, in bytes
    #[arg(long, default_value_t = 16 << 30)]
    max_decompressed_bytes: u64,
}

/// A failure that is the input's fault (exit 2), as opposed to ours or the system's (exit 1).
#[derive(Debug)]
struct BadInput(LoadError);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BadInput {}

/// `check` found a limit exceeded (exit 1; the report says which).
#[derive(Debug)]
struct OverBudget;

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("over budget")
    }
}

impl std::error::Error for OverBudget {}

/// A request that does not fit the input or the options (exit 2, like clap's usage errors).
#[derive(Debug)]
struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

const PROGRESS_THRESHOLD: u64 = 64 << 20;

/// Leaves a loaded snapshot (and what was built from it) to the operating system: the
/// process ends right after the command, and freeing its many small allocations one by
/// one took milliseconds (about 1% of `summary` on a 500 MB file) that the exit does not
/// need.
fn keep_until_exit<T>(v: T) {
    std::mem::forget(v);
}

/// Seconds spent loading, for `LEAKSCOPE_TIMINGS=1` (which prints load and total times
/// to stderr, so the cost of an analysis can be told from the cost of reading the file).
static LOAD_SECONDS: std::sync::Mutex<f64> = std::sync::Mutex::new(0.0);
/// Whether `load` repeats the loader's warnings on stderr (`summary` prints them itself).
static WARN_ON_LOAD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

fn load(path: &Path, args: &LoadArgs) -> anyhow::Result<Snapshot> {
    let started = std::time::Instant::now();
    let result = load_inner(path, args);
    if let Ok(mut s) = LOAD_SECONDS.lock() {
        *s += started.elapsed().as_secs_f64();
    }
    if let Ok(snap) = &result
        && WARN_ON_LOAD.load(std::sync::atomic::Ordering::Relaxed)
    {
        for w in &snap.warnings {
            eprintln!("leakscope: warning: {}: {w}", path.display());
        }
    }
    result
}

fn load_inner(path: &Path, args: &LoadArgs) -> anyhow::Result<Snapshot> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let bar = (size > PROGRESS_THRESHOLD && std::io::stderr().is_terminal()).then(|| {
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
    });
    let mut tick = |done: u64, total: u64| {
        if let Some(pb) = &bar {
            pb.set_length(total);
            pb.set_position(done);
        }
    };
    let opts = LoadOptions {
        max_decompressed_bytes: args.max_decompressed_bytes,
        progress: Some(&mut tick),
        ..LoadOptions::default()
    };
    let result = leakscope::load_path(path, opts);
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    result.map_err(|e| BadInput(e).into())
}

/// Prints `report` as pretty JSON, or the text `render` makes of it.
fn emit<T: serde::Serialize>(
    json: bool,
    report: &T,
    render: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    if json {
        write_stdout(&(serde_json::to_string_pretty(report)? + "\n"))
    } else {
        write_stdout(&render(report))
    }
}

fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // A closed pipe (`| head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to standard output"),
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let style = Style::detect(std::io::stdout().is_terminal());
    if matches!(cli.command, Command::Summary { .. }) {
        WARN_ON_LOAD.store(false, std::sync::atomic::Ordering::Relaxed);
    }
    match cli.command {
        Command::Summary {
            file,
            json,
            load: la,
        } => {
            let snap = load(&file, &la)?;
            let s = summary::summarize(&snap, &file.display().to_string());
            keep_until_exit(snap);
            emit(json, &s, |r| render::summary::text(r, style))
        }
        Command::Top {
            file,
            point,
            limit,
            json,
            attr,
            load: la,
        } => {
            let live = live_at(&file, &point, &attr, &la)?;
            let mut attributor = Attributor::new(&live.snap, live.by, &live.filters);
            let report = top::top(&live.replay, live.point, &mut attributor, limit);
            emit(json, &report, |r| render::top::text(r, style))
        }
        Command::Leaks {
            file,
            win,
            warmup,
            min_bytes,
            json,
            attr,
            load: la,
        } => {
            let opts = leaks::LeakOptions { warmup, min_bytes };
            let report = leak_run(&file, &win, &attr, &la, &opts, true)?.report;
            emit(json, &report, |r| render::leaks::text(r, style))
        }
        Command::Compare {
            a,
            b,
            win,
            json,
            attr,
            load: la,
        } => {
            let opts = leaks::LeakOptions::default();
            let ra = leak_run(&a, &win, &attr, &la, &opts, false)?;
            let rb = leak_run(&b, &win, &attr, &la, &opts, true)?;
            let report = compare::compare(
                &a.display().to_string(),
                &ra.report,
                &ra.end,
                ra.backward,
                &b.display().to_string(),
                &rb.report,
                &rb.end,
                rb.backward,
            );
            emit(json, &report, |r| render::leaks::compare_text(r, style))
        }
        Command::Oom {
            file,
            win,
            json,
            attr,
            load: la,
        } => {
            let (by, filters) = attr.options()?;
            let snap = load(&file, &la)?;
            let d = oom_or_picked_device(&snap, win.device)?;
            let dev = device_view(&snap, d);
            let rep = leakscope::replay::replay(&dev);
            let mut attributor = Attributor::new(&snap, by, &filters);
            let w = windows_of(&snap, d, &win, &attributor)?;
            let report = oom::explain_with_growth(&snap, &dev, &rep, &w, &mut attributor);
            emit(json, &report, |r| render::oom::text(r, style))
        }
        Command::Segments {
            file,
            point,
            json,
            load: la,
        } => {
            let at = At::parse(&point.at).map_err(|e| Usage(format!("--at {e}")))?;
            let snap = load(&file, &la)?;
            let d = pick_device(&snap, point.device)?;
            let dev = device_view(&snap, d);
            let rep = leakscope::replay::replay(&dev);
            let p = top::resolve(&snap, &rep, at).map_err(Usage)?;
            let state = match at {
                At::End => leakscope::replay::AllocatorState::at_end(&dev),
                _ => leakscope::replay::AllocatorState::after(&dev, p.event_index),
            };
            let report = segments::segments(d, p, &state);
            emit(json, &report, |r| render::segments::text(r, style))
        }
        Command::Ranks { dir, windows, json } => {
            let spec = WindowSpec::parse(&windows).map_err(|e| Usage(format!("--windows {e}")))?;
            if !dir.is_dir() {
                return Err(Usage(format!("{} is not a directory", dir.display())).into());
            }
            let report = ranks::ranks(&dir, &spec)
                .with_context(|| format!("cannot read {}", dir.display()))?;
            if report.ranks.is_empty() {
                return Err(Usage(format!(
                    "no snapshot files below {} (looked for .pickle, .pkl, .json, .msgpack, optionally .gz/.zst)",
                    dir.display()
                ))
                .into());
            }
            emit(json, &report, |r| render::ranks::text(r, style))
        }
        Command::Check {
            files,
            budget,
            baseline,
            windows,
            junit,
            json,
        } => {
            let text = std::fs::read_to_string(&budget)
                .map_err(|e| Usage(format!("cannot read the budget {}: {e}", budget.display())))?;
            let b = check::Budget::parse(&text)
                .map_err(|e| Usage(format!("budget {}: {e}", budget.display())))?;
            let base = match &baseline {
                Some(p) => {
                    let t = std::fs::read_to_string(p).map_err(|e| {
                        Usage(format!("cannot read the baseline {}: {e}", p.display()))
                    })?;
                    let v: serde_json::Value = serde_json::from_str(&t)
                        .map_err(|e| Usage(format!("baseline {}: {e}", p.display())))?;
                    Some(check::baseline_from_json(&v).map_err(Usage)?)
                }
                None => None,
            };
            let win = WindowArgs {
                windows: windows
                    .or(b.windows.spec.clone())
                    .unwrap_or_else(|| "auto".into()),
                within: b.windows.within.clone(),
                device: None,
            };
            let attr = AttrArgs {
                by: None,
                exclude: None,
                focus: None,
                python_only: false,
                keep_internal: false,
                user_code: None,
            };
            let mut checked = Vec::new();
            for f in &files {
                let run = leak_run(
                    f,
                    &win,
                    &attr,
                    &LoadArgs {
                        max_decompressed_bytes: 16 << 30,
                    },
                    &leaks::LeakOptions::default(),
                    false,
                )?;
                let end_by_site: Vec<(String, u64)> = run
                    .end
                    .rows
                    .iter()
                    .map(|r| (r.key.clone(), r.bytes))
                    .collect();
                let measured =
                    check::measure(&run.report, run.peak, run.end_allocated, run.end_reserved);
                checked.push(check::check_file(
                    &f.display().to_string(),
                    &b,
                    &run.report,
                    &end_by_site,
                    measured,
                    base.as_ref(),
                ));
            }
            let passed = checked.iter().all(|f| f.cases.iter().all(|c| c.passed));
            let report = check::CheckReport {
                schema: check::SCHEMA,
                files: checked,
                passed,
            };
            if let Some(j) = &junit {
                std::fs::write(j, check::junit(&report))
                    .with_context(|| format!("cannot write {}", j.display()))?;
            }
            emit(json, &report, |r| render::check::text(r, style))?;
            if passed {
                Ok(())
            } else {
                Err(OverBudget.into())
            }
        }
        Command::Windows {
            file,
            win,
            json,
            attr,
            load: la,
        } => {
            let (by, filters) = attr.options()?;
            let snap = load(&file, &la)?;
            let d = pick_device(&snap, win.device)?;
            let attributor = Attributor::new(&snap, by, &filters);
            let w = windows_of(&snap, d, &win, &attributor)?;
            emit(json, &w, |r| render::leaks::windows_text(r, style))
        }
        Command::Tree {
            file,
            point,
            min_share,
            json,
            attr,
            load: la,
        } => {
            if !(0.0..=1.0).contains(&min_share) {
                return Err(Usage(format!(
                    "--min-share {min_share}: use a fraction from 0 to 1"
                ))
                .into());
            }
            whole_stacks(&attr, "tree")?;
            let live = live_at(&file, &point, &attr, &la)?;
            let mut attributor = Attributor::new(&live.snap, live.by, &live.filters);
            let report = tree::tree(&live.replay, live.point, &mut attributor);
            if json {
                write_stdout(&(tree_json(&report)? + "\n"))
            } else {
                write_stdout(&render::tree::text(&report, min_share, style))
            }
        }
        Command::Report {
            file,
            output,
            win,
            json,
            attr,
            load: la,
        } => {
            let (by, filters) = attr.options()?;
            let snap = load(&file, &la)?;
            let d = oom_or_picked_device(&snap, win.device)?;
            let rep = replay_device(&snap, d);
            let mut attributor = Attributor::new(&snap, by, &filters);
            let w = windows_of(&snap, d, &win, &attributor)?;
            let data = analysis::report::report(
                &snap,
                &file.display().to_string(),
                &rep,
                &w,
                &mut attributor,
                &analysis::report::ReportOptions::default(),
            );
            let data_json = serde_json::to_string(&data)?;
            if json {
                return write_stdout(&(data_json + "\n"));
            }
            let lines = render::flamegraph::folded(&data.peak_tree.tree);
            let svg = if lines.is_empty() {
                None
            } else {
                let title = format!(
                    "live memory at {}",
                    render::tree::point_text(&data.peak_tree.at)
                );
                let svg = render::flamegraph::svg_sized(&lines, &title, None, Some(1200))
                    .context("cannot draw the flame graph")?;
                Some(String::from_utf8_lossy(&svg).into_owned())
            };
            let html = render::html::page(&data, &data_json, svg.as_deref());
            write_file(&output, html.as_bytes())?;
            eprintln!(
                "wrote {} ({}; peak {} after event {})",
                output.display(),
                render::bytes(html.len() as u64),
                render::bytes(data.peak.live_bytes),
                data.peak
                    .event_index
                    .map_or("(none)".into(), |i| render::count(i as u64)),
            );
            Ok(())
        }
        Command::Flamegraph {
            file,
            point,
            output,
            folded,
            attr,
            load: la,
        } => {
            whole_stacks(&attr, "flamegraph")?;
            let live = live_at(&file, &point, &attr, &la)?;
            let mut attributor = Attributor::new(&live.snap, live.by, &live.filters);
            let report = tree::tree(&live.replay, live.point, &mut attributor);
            let lines = render::flamegraph::folded(&report.tree);
            if folded {
                let text = render::flamegraph::folded_text(&lines);
                return match output {
                    Some(path) => write_file(&path, text.as_bytes()),
                    None => write_stdout(&text),
                };
            }
            let path = output.unwrap_or_else(|| PathBuf::from("flamegraph.svg"));
            let title = format!("live memory at {}", render::tree::point_text(&report.at));
            let mut subtitle = format!(
                "{}, device {}: {} bytes live",
                file.file_name()
                    .unwrap_or(file.as_os_str())
                    .to_string_lossy(),
                report.device,
                render::count(report.at.live_bytes),
            );
            if report.total_bytes == report.at.live_bytes {
                subtitle += &format!(" in {} allocations", render::count(report.total_blocks));
            } else {
                subtitle += &format!(
                    "; drawn: {} bytes in {} allocations",
                    render::count(report.total_bytes),
                    render::count(report.total_blocks)
                );
            }
            if lines.is_empty() {
                anyhow::bail!(
                    "nothing to draw: {}",
                    if live.filters.focus.is_some() {
                        "no live allocation matches --focus"
                    } else {
                        "no bytes are live at this point"
                    }
                );
            }
            let svg = render::flamegraph::svg(&lines, &title, Some(&subtitle))
                .context("cannot draw the flame graph")?;
            write_file(&path, &svg)?;
            eprintln!(
                "wrote {} ({} in {} stack{})",
                path.display(),
                render::bytes(report.total_bytes),
                render::count(lines.len() as u64),
                if lines.len() == 1 { "" } else { "s" }
            );
            Ok(())
        }
        Command::Convert {
            input,
            output,
            load: la,
        } => {
            let snap = load(&input, &la)?;
            let ext = output
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or("")
                .to_ascii_lowercase();
            match ext.as_str() {
                "msgpack" | "mpk" => leakscope::load::cache::write(&snap, &output)?,
                "json" => {
                    let v = leakscope::convert::to_snapshot_json(&snap);
                    let f = std::fs::File::create(&output)
                        .with_context(|| format!("cannot create {}", output.display()))?;
                    let mut w = std::io::BufWriter::new(f);
                    serde_json::to_writer(&mut w, &v)?;
                    w.flush()
                        .with_context(|| format!("cannot write {}", output.display()))?;
                }
                _ => anyhow::bail!(
                    "cannot tell the output format from {}: name it .msgpack (leakscope cache) or .json",
                    output.display()
                ),
            }
            eprintln!("wrote {}", output.display());
            Ok(())
        }
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "leakscope", &mut std::io::stdout());
            Ok(())
        }
    }
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let started = std::time::Instant::now();
    let result = run(cli);
    if std::env::var_os("LEAKSCOPE_TIMINGS").is_some_and(|v| v == "1") {
        let load = LOAD_SECONDS.lock().map(|s| *s).unwrap_or(0.0);
        let total = started.elapsed().as_secs_f64();
        eprintln!(
            "leakscope timings: load {load:.3} s, analysis and output {:.3} s, total {total:.3} s{}",
            total - load,
            main_thread_schedstat()
        );
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<OverBudget>().is_some() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("leakscope: {e:#}");
            if e.downcast_ref::<BadInput>().is_some() || e.downcast_ref::<Usage>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
