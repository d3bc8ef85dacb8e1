//! The command line's arguments: clap definitions whose values are the library's typed
//! options (parsed once, by their `FromStr`; a bad value is a usage error, exit 2).

use std::path::PathBuf;

use crate::analysis::At;
use crate::analysis::range::Bound;
use crate::attribute::GroupBy;
use std::sync::Arc;

use crate::attribute::roles::RoleRules;
use crate::session::args::roles_file;
pub use crate::session::args::{FilterArgs, GroupArgs, LeakArgs, WindowArgs, options};
use crate::session::{DeviceSelection, Options};
use crate::windows::WindowSpec;
use clap::{Parser, Subcommand};

/// Reads PyTorch CUDA / torch_npu memory snapshots and says what holds GPU memory.
#[derive(Parser)]
#[command(name = "leakscope", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The commands; each one's description is the doc line of its arguments' struct, which
/// clap shows in `--help` (written there once).
#[derive(Subcommand)]
pub enum Command {
    Summary(SummaryCmd),
    Top(TopCmd),
    Leaks(LeaksCmd),
    Compare(CompareCmd),
    Oom(OomCmd),
    Segments(SegmentsCmd),
    Ranks(RanksCmd),
    Check(CheckCmd),
    Windows(WindowsCmd),
    Phases(PhasesCmd),
    Timeline(TimelineCmd),
    Tree(TreeCmd),
    Flamegraph(FlamegraphCmd),
    Report(ReportCmd),
    Convert(ConvertCmd),
    Export(ExportCmd),
    Slice(SliceCmd),
    #[cfg(feature = "mcp")]
    Mcp(McpCmd),
    /// Print shell completions (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
}

impl Command {
    /// The files this command writes, as (option, path): checked together before the
    /// command runs, so two of them never land on one file. The Parquet export counts as
    /// its tables' files.
    pub fn outputs(&self) -> Vec<(String, PathBuf)> {
        let one = |option: &str, p: &PathBuf| (option.to_string(), p.clone());
        match self {
            Command::Check(c) => c.junit.iter().map(|p| one("--junit", p)).collect(),
            Command::Flamegraph(c) => c.output.iter().map(|p| one("--output", p)).collect(),
            Command::Report(c) if !c.json => vec![one("--output", &c.output)],
            Command::Convert(c) => vec![one("the output", &c.output)],
            Command::Slice(c) => vec![one("--output", &c.output)],
            Command::Export(c) => {
                let mut v = Vec::new();
                if let Some(dir) = &c.parquet {
                    for t in crate::export::encode::parquet::Table::ALL {
                        v.push(("--parquet".to_string(), dir.join(t.file_name())));
                    }
                }
                v.extend(c.perfetto.iter().map(|p| one("--perfetto", p)));
                v.extend(c.pprof.iter().map(|p| one("--pprof", p)));
                v
            }
            _ => Vec::new(),
        }
    }
}

/// What a snapshot holds: format, devices, segments, blocks, bytes, trace events
#[derive(clap::Args)]
pub struct SummaryCmd {
    /// Snapshot file (pickle, JSON or leakscope cache; plain, .gz or .zst)
    pub file: PathBuf,
    /// Print JSON (schema leakscope.summary/2) instead of a table
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// What holds memory at a point (end, peak, oom, an event, a time), by call site
#[derive(clap::Args)]
pub struct TopCmd {
    /// Snapshot file
    pub file: PathBuf,
    #[command(flatten)]
    pub at: AtPoint,
    #[command(flatten)]
    pub group: GroupArgs,
    /// Rows to show per device (the rest is summed in one line)
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print JSON (schema leakscope.top/4)
    #[arg(long)]
    pub json: bool,
}

/// The call sites whose memory grows per window (micro-batch): leaks and retained memory
#[derive(clap::Args)]
pub struct LeaksCmd {
    /// Snapshot file; or several, one per step in step order (a series: growth between consecutive files); or a run directory (its files of one rank, in step order)
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// With a run directory: the rank whose files form the series
    #[arg(long)]
    pub rank: Option<u64>,
    #[command(flatten)]
    pub analysis: Analysis,
    #[command(flatten)]
    pub leak: LeakArgs,
    /// Print JSON (schema leakscope.leaks/8)
    #[arg(long)]
    pub json: bool,
}

/// Two runs side by side: growth per site and end state (forward-only vs training, before vs after a fix)
#[derive(clap::Args)]
pub struct CompareCmd {
    /// Run A (for example the forward-only run, or before a fix); a run directory with --at compares step by step
    pub a: PathBuf,
    /// Run B (for example the training run, or after a fix); a run directory with --at compares step by step
    pub b: PathBuf,
    #[command(flatten)]
    pub analysis: Analysis,
    /// Compare what each run holds at this point, site by site, instead of growth: peak, end, oom (JSON schema leakscope.compare_at/2)
    #[arg(long)]
    pub at: Option<At>,
    /// Print JSON (schema leakscope.compare/3)
    #[arg(long)]
    pub json: bool,
}

/// Why an allocation failed: the request, free memory and its fragmentation, holders, growth, advice
#[derive(clap::Args)]
pub struct OomCmd {
    /// Snapshot file (an OOM dump, or a snapshot taken at the failure)
    pub file: PathBuf,
    #[command(flatten)]
    pub analysis: Analysis,
    /// Print JSON (schema leakscope.oom/5)
    #[arg(long)]
    pub json: bool,
}

/// The segment map at a point: every segment, its blocks, free space inside and between them
#[derive(clap::Args)]
pub struct SegmentsCmd {
    /// Snapshot file
    pub file: PathBuf,
    #[command(flatten)]
    pub point: PointArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Print JSON (schema leakscope.segments/3)
    #[arg(long)]
    pub json: bool,
}

/// Every allocation over the trace, as memory_viz's timeline draws it (the largest one by one, the rest summed)
#[derive(clap::Args)]
pub struct TimelineCmd {
    /// Snapshot file
    pub file: PathBuf,
    #[command(flatten)]
    pub drawn: DrawnArgs,
    /// Device index, or all (every device with segments or trace events)
    #[arg(long, default_value = "all")]
    pub device: DeviceSelection,
    #[command(flatten)]
    pub filters: FilterArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Print JSON (schema leakscope.timeline/1)
    #[arg(long)]
    pub json: bool,
}

/// A whole run: every rank and step in a directory (verl, torch_npu layouts), outliers flagged
#[derive(clap::Args)]
pub struct RanksCmd {
    /// Directory holding per-rank (and per-step) snapshots
    pub dir: PathBuf,
    /// How windows are made.
    #[arg(long, default_value = "auto", help = crate::windows::SPEC_FORMS)]
    pub windows: WindowSpec,
    /// Print JSON (schema leakscope.ranks/5)
    #[arg(long)]
    pub json: bool,
}

/// CI memory gate: limits from a budget file (and a baseline), per device; exit 1 when over budget
#[derive(clap::Args)]
pub struct CheckCmd {
    /// Snapshots to check
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Budget file (TOML; see docs/leakscope.toml)
    #[arg(long)]
    pub budget: PathBuf,
    /// JSON of an earlier `check --json` or `leaks --json` to compare against
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Windows (overrides the budget's [windows] spec)
    #[arg(long)]
    pub windows: Option<WindowSpec>,
    /// Write JUnit XML here (a test case per limit)
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Print JSON (schema leakscope.check/5)
    #[arg(long)]
    pub json: bool,
    /// Your own memory roles: a TOML file with a [roles] table (instead of the budget's own)
    #[arg(long, value_name = "FILE", value_parser = roles_file)]
    pub roles: Option<Arc<RoleRules>>,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// How the trace is cut into windows (micro-batches) for leaks, and why
#[derive(clap::Args)]
pub struct WindowsCmd {
    /// Snapshot file
    pub file: PathBuf,
    #[command(flatten)]
    pub win: WindowArgs,
    #[command(flatten)]
    pub filters: FilterArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Print JSON (schema leakscope.windows/4)
    #[arg(long)]
    pub json: bool,
}

/// A Model Context Protocol server over stdio for coding agents: the commands as tools
///
/// Each tool is a command (summary, top, tree, leaks, windows, phases, oom, segments,
/// compare, ranks, timeline) with its arguments by name, and returns the document the
/// command prints with --json. Files stay loaded between calls while unchanged; each is a
/// resource (leakscope://snapshot/PATH) holding its summary. See docs/agents.md.
#[cfg(feature = "mcp")]
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct McpCmd {
    /// Files kept loaded at once (the least recently asked about is dropped beyond it)
    #[arg(long, default_value_t = 8)]
    pub keep: usize,
}

/// Memory per annotated phase: live bytes at the start, peak and end of each record_function range
#[derive(clap::Args)]
pub struct PhasesCmd {
    /// Snapshot file
    pub file: PathBuf,
    /// Device index, or all (every device with segments or trace events)
    #[arg(long, default_value = "all")]
    pub device: DeviceSelection,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Print JSON (schema leakscope.phases/1)
    #[arg(long)]
    pub json: bool,
}

/// The call tree of the memory live at a point: bytes per frame, inclusive and self
#[derive(clap::Args)]
pub struct TreeCmd {
    /// Snapshot file
    pub file: PathBuf,
    #[command(flatten)]
    pub at: AtPoint,
    /// Sum up nodes under this share of the tree's bytes in one line (0 shows every node)
    #[arg(long, default_value_t = crate::render::tree::DEFAULT_MIN_SHARE, value_parser = share)]
    pub min_share: f64,
    /// role: a node per memory role under the root, with the stacks of its memory below
    #[arg(long, value_parser = tree_by)]
    pub by: Option<GroupBy>,
    /// Print JSON (schema leakscope.tree/4)
    #[arg(long)]
    pub json: bool,
}

/// A flame graph of the memory live at a point (SVG, or folded stacks with --folded)
#[derive(clap::Args)]
pub struct FlamegraphCmd {
    /// Snapshot file
    pub file: PathBuf,
    #[command(flatten)]
    pub at: AtPoint,
    /// Output file (default: flamegraph.svg; with --folded, standard output)
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Write folded stacks (`outer;...;inner BYTES` lines) instead of an SVG
    #[arg(long)]
    pub folded: bool,
}

/// A self-contained HTML report (charts, tables, flamegraph per device) that opens offline
#[derive(clap::Args)]
pub struct ReportCmd {
    /// Snapshot file
    pub file: PathBuf,
    /// Output file
    #[arg(short, long, default_value = "leakscope-report.html")]
    pub output: PathBuf,
    #[command(flatten)]
    pub analysis: Analysis,
    #[command(flatten)]
    pub drawn: DrawnArgs,
    /// Print the report's data as JSON (schema leakscope.report/7) instead of writing HTML
    #[arg(long)]
    pub json: bool,
}

/// Convert a snapshot to leakscope's MessagePack cache (.msgpack) or to JSON (.json)
#[derive(clap::Args)]
pub struct ConvertCmd {
    /// Input snapshot
    pub input: PathBuf,
    /// Output file: `.msgpack` writes the cache, `.json` snapshot-shaped JSON; `-` is
    /// standard output (then say --format)
    pub output: PathBuf,
    /// The output's format where its name does not say (`-`, a device, a FIFO)
    #[arg(long, value_enum)]
    pub format: Option<ConvertFormat>,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// What `convert` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ConvertFormat {
    /// Snapshot-shaped JSON
    Json,
    /// leakscope's MessagePack cache
    Msgpack,
}

/// Export for other tools: Parquet tables (whole runs), a Perfetto timeline, pprof profiles
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("outputs").required(true).multiple(true).args(["parquet", "perfetto", "pprof"])))]
pub struct ExportCmd {
    /// Snapshot files, and run directories (their snapshots found as `ranks` finds them)
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Write Parquet tables here (files, ranks, suspects, top sites, events, stacks), one file each (created if missing; files replaced)
    #[arg(long, value_name = "OUT_DIR")]
    pub parquet: Option<PathBuf>,
    /// Write a Perfetto trace of every file (a process per file/rank, tracks per device); gzipped when the name ends in .gz. Open it in ui.perfetto.dev
    #[arg(long, value_name = "OUT.perfetto-trace")]
    pub perfetto: Option<PathBuf>,
    /// Perfetto: sites with a live-bytes counter of their own (the largest at the peak; the rest are "other")
    #[arg(long, default_value_t = 8, requires = "perfetto", value_parser = clap::value_parser!(u8).range(0..=254))]
    pub top_sites: u8,
    /// Write a gzipped pprof profile of one file: live bytes and allocations by stack at --at (or, with --growth, survivors per window). Open it with `go tool pprof` or speedscope
    #[arg(long, value_name = "OUT.pb.gz")]
    pub pprof: Option<PathBuf>,
    /// The pprof profile's point: end, peak, oom, event:N or time:US
    #[arg(long, default_value = "end", requires = "pprof")]
    pub at: At,
    /// pprof: survivor bytes per window by stack (what leaks) instead of live bytes at --at
    #[arg(long, requires = "pprof", conflicts_with = "at")]
    pub growth: bool,
    /// How windows are made.
    #[arg(long, default_value = "auto", help = crate::windows::SPEC_FORMS)]
    pub windows: WindowSpec,
    /// Device index, or all (every device with segments or trace events)
    #[arg(long, default_value = "all")]
    pub device: DeviceSelection,
    /// Your own memory roles: a TOML file with a [roles] table ("regex" = "role")
    #[arg(long, value_name = "FILE", value_parser = roles_file)]
    pub roles: Option<Arc<RoleRules>>,
    /// Print what was written as JSON (leakscope.export/1, leakscope.export.perfetto/1, leakscope.export.pprof/1; several outputs: an object with one member each)
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// A range of the trace as a snapshot of its own (pickle) that memory_viz and PyTorch's tools read
///
/// The range is (FROM, TO]: the events after FROM up to and including TO, resolved on the
/// reference device (--device N, else the device with the most events). The output holds
/// the allocator state after TO as `segments`, the range's events as `device_traces`, and
/// the `external_annotations` inside its time range. Without --device, every other device
/// keeps its events in the same time range (time_us after FROM's, up to TO's; start and
/// end are open) and its state after them; with --device N only device N is written.
///
/// Points: start, end, peak, oom, event:N (after event N), time:US (after the last event
/// at or before US), and any of start/end/peak/oom/event:N moved by events: peak-1000,
/// event:500+20 (kept inside the trace). --around P --events N is --from P-N --to P+N.
///
/// Example: leakscope slice run.pickle --around peak --events 1000 -o peak.pickle
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct SliceCmd {
    /// Snapshot file
    pub file: PathBuf,
    /// Start after this point: start, end, peak, oom, event:N, time:US, or peak-1000 style
    #[arg(long, default_value = "start", conflicts_with = "around")]
    pub from: Bound,
    /// End after this point (its event is the slice's last): as --from
    #[arg(long, default_value = "end", conflicts_with = "around")]
    pub to: Bound,
    /// A range around this point: --events N before and after it
    #[arg(long, requires = "events")]
    pub around: Option<Bound>,
    /// With --around: events before and after the point
    #[arg(long, requires = "around")]
    pub events: Option<u32>,
    /// Reference device index, and the only device written (default: the device with the most events; every device written)
    #[arg(long, default_value = "all")]
    pub device: DeviceSelection,
    /// Output pickle (refused when it is the input)
    #[arg(short, long)]
    pub output: PathBuf,
    /// Print what was written as JSON (schema leakscope.slice/1)
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// What the analyses of a file take: windows and devices, grouping, frame filters, and
/// how to load it.
#[derive(clap::Args)]
pub struct Analysis {
    #[command(flatten)]
    pub win: WindowArgs,
    #[command(flatten)]
    pub group: GroupArgs,
    #[command(flatten)]
    pub filters: FilterArgs,
    #[command(flatten)]
    pub load: LoadArgs,
}

impl Analysis {
    /// The session's options.
    pub fn options(&self) -> Options {
        options(
            self.win.device,
            Some(&self.win),
            Some(&self.group),
            &self.filters,
        )
    }
}

/// What a view of one point takes: the point and devices, frame filters, and how to load.
#[derive(clap::Args)]
pub struct AtPoint {
    #[command(flatten)]
    pub point: PointArgs,
    #[command(flatten)]
    pub filters: FilterArgs,
    #[command(flatten)]
    pub load: LoadArgs,
}

impl AtPoint {
    /// The session's options, grouped by `group` where the command groups.
    pub fn options(&self, group: Option<&GroupArgs>) -> Options {
        options(self.point.device, None, group, &self.filters)
    }
}

/// `tree --by`: a grouping, as the call tree takes it.
fn tree_by(s: &str) -> Result<GroupBy, String> {
    s.parse::<GroupBy>()
        .map_err(|e| e.to_string())?
        .for_tree()
        .map_err(|e| e.to_string())
}

fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}`: use a fraction from 0 to 1")),
    }
}

/// How many allocations a timeline draws one by one (`timeline`, `report`).
#[derive(clap::Args)]
pub struct DrawnArgs {
    /// Allocations drawn one by one per device (the largest by bytes x lifetime); the rest are summed in one band, exact after every event
    #[arg(long, default_value_t = crate::analysis::allocations::DEFAULT_MAX_ALLOCATIONS)]
    pub max_allocations: usize,
}

#[derive(clap::Args)]
pub struct LoadArgs {
    /// Largest decompressed size accepted for .gz/.zst input, in bytes (by default the
    /// smaller of 16 GiB and half this machine's memory)
    #[arg(long, default_value_t = crate::session::default_max_decompressed_bytes())]
    pub max_decompressed_bytes: u64,
}

#[derive(clap::Args)]
pub struct PointArgs {
    /// Where: end, peak, oom, event:N (after event N) or time:US (after the last event at or before US)
    #[arg(long, default_value = "end")]
    pub at: At,
    /// Device index, or all (every device with segments or trace events)
    #[arg(long, default_value = "all")]
    pub device: DeviceSelection,
}
