//! `export --perfetto`: files (ranks) on one Perfetto timeline. Each file is a process,
//! each of its devices a group of tracks: counters of live (requested), allocated and
//! reserved bytes, of the largest sites' live bytes and of each memory role's live bytes
//! (`role: parameter`, ...; the roles add up to the live bytes); slices for the windows the leak
//! finder judged (micro-batches) and for `record_function` ranges; instants for the peak,
//! each OOM and each suspect's onset.
//!
//! The time axis is `time_us` when every file's traces carry it (ranks line up by wall
//! clock), else the event index (one event per microsecond, each file from zero), and
//! the trace's metadata says which. The trace's size is bounded whatever the input: the
//! counters share a budget of points (each series keeps its extremes per bucket, so the
//! peak stays exact) and the slices one of slices.

use std::borrow::Cow;

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use super::parquet::expand;
use super::{ExportError, ExportOptions, Failed, Failure, open};
use crate::analysis::counters::{self, Counters, Series};
use crate::analysis::leaks::Growth;
use crate::analysis::roles::{RoleSeries, role_series};
use crate::analysis::spans::{self, Span};
use crate::error::ErrorKind;
use crate::export::encode::perfetto::{
    self, Arg, Counter, DeviceTracks, Instant, ProcessTracks, Slice, SliceTrack, Timeline,
};
use crate::model::fxhash::FastMap;
use crate::model::{DeviceView, Snapshot, TimedEvents, flags};
use crate::replay::AllocatorState;
use crate::session::Found;
use crate::session::{DeviceRun, Session, SessionError};

/// Schema of [`PerfettoSummary`]'s JSON.
pub const SCHEMA: &str = "leakscope.export.perfetto/1";

/// What a Perfetto export holds and how big it may get.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PerfettoOptions {
    /// Loading and analysis options (windows, grouping, filters).
    pub export: ExportOptions,
    /// Sites with a counter of their own (the rest are "other").
    pub top_sites: usize,
    /// Counter points in the whole trace at most (shared by files and devices).
    pub max_counter_points: usize,
    /// Buckets per device at most (each series keeps up to two points per bucket).
    pub max_buckets: usize,
    /// Slices (windows and `record_function` ranges) in the whole trace at most.
    pub max_slices: usize,
    /// Gzip the trace (the UI and the trace processor open `.gz` traces).
    pub gzip: bool,
}

impl Default for PerfettoOptions {
    fn default() -> Self {
        PerfettoOptions {
            export: ExportOptions::default(),
            top_sites: 8,
            max_counter_points: 400_000,
            max_buckets: 5_000,
            max_slices: 60_000,
            gzip: false,
        }
    }
}

/// What was written (`leakscope.export.perfetto/1`).
#[derive(Clone, Debug, Serialize)]
pub struct PerfettoSummary {
    /// Schema name.
    pub schema: &'static str,
    /// The trace file.
    pub out: String,
    /// Bytes of the trace (before gzip; the file's size is `file_bytes`).
    pub trace_bytes: u64,
    /// The file's size.
    pub file_bytes: u64,
    /// `time_us` or `event_index`.
    pub timebase: &'static str,
    /// Snapshot files on the timeline.
    pub files_read: u64,
    /// Inputs that could not be read.
    pub failed: Vec<Failed>,
    /// Devices drawn.
    pub devices: u64,
    /// Counter points written.
    pub counter_points: u64,
    /// Slices written.
    pub slices: u64,
    /// Instants written (peaks, OOMs, leak onsets).
    pub instants: u64,
    /// Windows drawn as one slice with their neighbours (over the slice budget).
    pub windows_merged: u64,
    /// `record_function` ranges left out (over the slice budget; the shortest go).
    pub ranges_left_out: u64,
}

/// Event index or `time_us` to trace nanoseconds, for one device (borrowing what the
/// device's findings hold).
enum Clock<'f> {
    /// Event `i` at `(i + 1)` µs; before the first event at 0.
    Index {
        events: usize,
        /// The timed events, for `record_function` times.
        timed: &'f TimedEvents<'f>,
    },
    /// `time_us` of each event (an untimed event takes the previous timed one's).
    Time { us: &'f [i64] },
}

const NS_PER_US: i64 = 1_000;

impl Clock<'_> {
    fn event(&self, e: u32) -> i64 {
        match self {
            Clock::Index { .. } => (i64::from(e) + 1) * NS_PER_US,
            Clock::Time { us } => us
                .get(e as usize)
                .copied()
                .unwrap_or(0)
                .saturating_mul(NS_PER_US),
        }
    }

    fn before_first(&self) -> i64 {
        match self {
            Clock::Index { .. } => 0,
            Clock::Time { .. } => self.event(0).saturating_sub(NS_PER_US),
        }
    }

    /// Just after the last event (where windows and open ranges end).
    fn end(&self) -> i64 {
        match self {
            Clock::Index { events, .. } => (*events as i64 + 1) * NS_PER_US,
            Clock::Time { us } => us
                .last()
                .map_or(0, |&t| t.saturating_add(1).saturating_mul(NS_PER_US)),
        }
    }

    /// `time_us` of an annotation: itself, or the first timed event at or after it.
    fn at_us(&self, t: i64) -> i64 {
        match self {
            Clock::Time { .. } => t.saturating_mul(NS_PER_US),
            Clock::Index { timed, .. } => {
                timed.at_or_after(t).map_or(self.end(), |e| self.event(e))
            }
        }
    }

    fn series(&self, s: &Series) -> Vec<(i64, u64)> {
        std::iter::once((self.before_first(), s.initial))
            .chain(s.points.iter().map(|&(e, v)| (self.event(e), v)))
            .collect()
    }
}

/// `time_us` per event: the trace's own column when every event is timed, else with each
/// gap filled by the previous timed event's time; `None` when no event is timed.
fn event_times<'s>(snap: &Snapshot, view: &DeviceView<'s>) -> Option<Cow<'s, [i64]>> {
    let t = view.trace;
    let timed = |i: usize| snap.meta(t.meta[i]).has(flags::TIME);
    let first = (0..t.len()).find(|&i| timed(i))?;
    if (first..t.len()).all(timed) && first == 0 {
        return Some(Cow::Borrowed(&t.time_us));
    }
    let mut last = t.time_us[first];
    Some(Cow::Owned(
        (0..t.len())
            .map(|i| {
                if timed(i) {
                    last = t.time_us[i];
                }
                last
            })
            .collect(),
    ))
}

/// What a device shows, in event indices and `time_us`; drawn by [`draw`] on either
/// time axis.
struct DeviceFindings<'s> {
    device: i64,
    events: usize,
    counters: Counters,
    /// Each role's live bytes (the roles that hold memory at some point).
    roles: Vec<RoleSeries>,
    /// `(name, first event, end event)` per window (or per group of windows); empty when
    /// the device has no windows to judge.
    windows: Vec<(String, u32, u32)>,
    windows_title: String,
    windows_merged: u64,
    spans: Vec<Span>,
    spans_left_out: u64,
    peak: (Option<u32>, u64),
    peak_reserved: u64,
    ooms: Vec<(u32, u64, u64, u64)>,
    suspects: Vec<(u32, Growth)>,
    times: Option<Cow<'s, [i64]>>,
    timed_events: TimedEvents<'s>,
}

/// Groups windows so at most `limit` slices remain: a group is named after its first and
/// last window.
fn window_slices(run: &mut DeviceRun, limit: usize) -> (Vec<(String, u32, u32)>, String, u64) {
    let w = run.windows();
    if !w.verdicts || w.is_empty() {
        return (Vec::new(), String::new(), 0);
    }
    let title = format!("windows: {} {}", w.source, w.detail);
    let n = w.len();
    let per = n.div_ceil(limit.max(1)).max(1);
    let name = |i: usize| {
        w.names
            .get(i)
            .filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| format!("window {i}"))
    };
    let slices = (0..n)
        .step_by(per)
        .map(|a| {
            let b = (a + per).min(n) - 1;
            let label = if a == b {
                name(a)
            } else {
                format!("windows {a}-{b}")
            };
            (label, w.range(a).0, w.range(b).1)
        })
        .collect();
    let merged = if per > 1 {
        (n - n.div_ceil(per)) as u64
    } else {
        0
    };
    (slices, title, merged)
}

fn final_blocks(view: &DeviceView) -> FastMap<u64, u64> {
    AllocatorState::at_end(view)
        .blocks()
        .filter(|(_, b)| b.active)
        .map(|(_, b)| (b.address, b.size))
        .collect()
}

/// Suspects whose onset is marked, per device at most.
const MAX_ONSETS: usize = 100;

/// Budgets of one device.
#[derive(Clone, Copy)]
struct Budget {
    buckets: usize,
    windows: usize,
    spans: usize,
}

fn findings<'s>(
    s: &Session,
    r: &mut DeviceRun<'s>,
    top_sites: usize,
    b: Budget,
) -> DeviceFindings<'s> {
    let snap = s.snapshot();
    let leaks = r.find_leaks();
    let (windows, windows_title, windows_merged) = window_slices(r, b.windows);
    let w = r.windows();
    // The largest suspects first; a bounded number of onsets keeps the trace bounded.
    let suspects = leaks
        .suspects
        .into_iter()
        .take(MAX_ONSETS)
        .filter_map(|g| {
            let at = w.starts.get(g.onset_window as usize).copied()?;
            Some((at, g))
        })
        .collect();
    let blocks = final_blocks(&r.view);
    let counters = counters::counters(&r.replay, &mut r.attr, &blocks, top_sites, b.buckets);
    let roles = role_series(&r.replay, &r.attr, b.buckets);
    let (spans, spans_left_out) = spans::spans(snap, r.device(), b.spans);
    let rep = &r.replay;
    let t = r.view.trace;
    let ooms = rep
        .ooms
        .iter()
        .map(|&i| {
            let ix = i as usize;
            (i, rep.requested[ix], rep.reserved[ix], t.size[ix])
        })
        .collect();
    let peak = rep.peak();
    let peak_reserved = peak
        .0
        .map_or(rep.initial_reserved, |i| rep.reserved[i as usize]);
    let times = event_times(snap, &r.view);
    // Only `record_function` times are placed by event.
    let timed_events = if spans.is_empty() {
        TimedEvents::default()
    } else {
        TimedEvents::of(t, &snap.metas)
    };
    DeviceFindings {
        device: r.device(),
        events: rep.len(),
        counters,
        roles,
        windows,
        windows_title,
        windows_merged,
        spans,
        spans_left_out,
        peak,
        peak_reserved,
        ooms,
        suspects,
        times,
        timed_events,
    }
}

fn arg(name: &str, v: Arg) -> (String, Arg) {
    (name.to_string(), v)
}

/// A device's tracks on one time axis.
fn draw(f: &DeviceFindings, clock: &Clock) -> DeviceTracks {
    let c = &f.counters;
    let mut counters = vec![
        Counter {
            name: "live bytes (requested)".into(),
            description: "Bytes the program asked for, from alloc to free_completed".into(),
            points: clock.series(&c.live),
        },
        Counter {
            name: "allocated bytes".into(),
            description: "Blocks allocated and not pending free (torch.cuda.memory_allocated)"
                .into(),
            points: clock.series(&c.allocated),
        },
        Counter {
            name: "reserved bytes".into(),
            description: "Segments (torch.cuda.memory_reserved)".into(),
            points: clock.series(&c.reserved),
        },
    ];
    for (i, s) in c.sites.iter().enumerate() {
        counters.push(Counter {
            name: format!("site {}: {}", i + 1, s.site.label),
            description: format!(
                "Live bytes allocated at {} ({} at the peak)",
                s.site.label, s.bytes_at_peak
            ),
            points: clock.series(&s.series),
        });
    }
    if !c.sites.is_empty() {
        counters.push(Counter {
            name: "site: other".into(),
            description: "Live bytes of every other site".into(),
            points: clock.series(&c.other),
        });
    }
    for x in &f.roles {
        counters.push(Counter {
            name: format!("role: {}", x.role),
            description: format!(
                "Live bytes of the allocations whose memory role is {} ({} at most)",
                x.role,
                crate::render::bytes(x.peak)
            ),
            points: clock.series(&x.series),
        });
    }
    let mut slices = Vec::new();
    if !f.windows.is_empty() {
        slices.push(SliceTrack {
            name: f.windows_title.clone(),
            description: "The windows (units of work) the leak finder judged growth across".into(),
            slices: f
                .windows
                .iter()
                .map(|(name, a, b)| Slice {
                    name: name.clone(),
                    start_ns: clock.event(*a),
                    end_ns: if (*b as usize) < f.events {
                        clock.event(*b)
                    } else {
                        clock.end()
                    }
                    .max(clock.event(*a)),
                    args: vec![
                        arg("first_event", Arg::Uint(u64::from(*a))),
                        arg("end_event", Arg::Uint(u64::from(*b))),
                    ],
                })
                .collect(),
        });
    }
    let lanes = f.spans.iter().map(|s| s.lane + 1).max().unwrap_or(0);
    for lane in 0..lanes {
        slices.push(SliceTrack {
            name: if lane == 0 {
                "record_function".into()
            } else {
                format!("record_function ({})", lane + 1)
            },
            description: "record_function ranges (external_annotations)".into(),
            slices: f
                .spans
                .iter()
                .filter(|s| s.lane == lane)
                .map(|s| {
                    let start = clock.at_us(s.start_us);
                    Slice {
                        name: s.name.clone(),
                        start_ns: start,
                        end_ns: s.end_us.map_or(clock.end(), |e| clock.at_us(e)).max(start),
                        args: Vec::new(),
                    }
                })
                .collect(),
        });
    }
    let mut instants = Vec::new();
    let peak_at = f.peak.0.map_or(clock.before_first(), |e| clock.event(e));
    instants.push(Instant {
        name: format!("peak: {} live", crate::render::bytes(f.peak.1)),
        ts_ns: peak_at,
        args: vec![
            arg("live_bytes", Arg::Uint(f.peak.1)),
            arg("reserved_bytes", Arg::Uint(f.peak_reserved)),
            arg(
                "event_index",
                f.peak.0.map_or(Arg::Int(-1), |e| Arg::Uint(u64::from(e))),
            ),
        ],
    });
    for &(e, live, reserved, asked) in &f.ooms {
        instants.push(Instant {
            name: format!("OOM: {} requested", crate::render::bytes(asked)),
            ts_ns: clock.event(e),
            args: vec![
                arg("event_index", Arg::Uint(u64::from(e))),
                arg("requested_size", Arg::Uint(asked)),
                arg("live_bytes", Arg::Uint(live)),
                arg("reserved_bytes", Arg::Uint(reserved)),
            ],
        });
    }
    for (e, g) in &f.suspects {
        let function = g.site.name.clone().unwrap_or_else(|| g.site.label.clone());
        instants.push(Instant {
            name: format!("{} onset: {function}", g.kind.as_str()),
            ts_ns: clock.event(*e),
            args: vec![
                arg("site", Arg::Str(g.site.label.clone())),
                arg("bytes_per_window", Arg::Uint(g.bytes_per_window)),
                arg("windows_growing", Arg::Uint(g.windows_growing)),
                arg("windows_total", Arg::Uint(g.windows_total)),
                arg("onset_window", Arg::Uint(g.onset_window)),
                arg("bytes_at_end", Arg::Uint(g.bytes_at_end)),
                arg("retained_bytes", Arg::Uint(g.retained_bytes)),
            ],
        });
    }
    DeviceTracks {
        name: format!("device {}", f.device),
        counters,
        slices,
        instants_name: "findings (peak, OOM, leak onsets)".into(),
        instants,
    }
}

/// One file's tracks: on the event-index axis, and on `time_us` when every device with a
/// trace carries it.
struct FileTracks {
    index: ProcessTracks,
    time: Option<ProcessTracks>,
    windows_merged: u64,
    ranges_left_out: u64,
}

fn file_tracks(
    s: &Session,
    found: &Found,
    pid: i32,
    opts: &PerfettoOptions,
    points_per_file: usize,
    slices_per_file: usize,
) -> Result<FileTracks, SessionError> {
    let mut runs = s.runs(&opts.export.analysis)?;
    // Devices with events; the others have nothing to draw over time.
    runs.retain(|r| !r.replay.is_empty());
    let devices = runs.len().max(1);
    let series = 4 + opts.top_sites + opts.export.analysis.roles.names().len();
    let budget = Budget {
        buckets: (points_per_file / devices / (2 * series)).clamp(16, opts.max_buckets.max(16)),
        windows: (slices_per_file / devices / 2).max(1),
        spans: (slices_per_file / devices / 2).max(1),
    };
    let found_all: Vec<DeviceFindings> = runs
        .par_iter_mut()
        .map(|r| findings(s, r, opts.top_sites, budget))
        .collect();
    let timed = !found_all.is_empty() && found_all.iter().all(|f| f.times.is_some());
    let name = match found.rank {
        Some(r) => format!("rank {r}: {}", s.name()),
        None => s.name().to_string(),
    };
    let process =
        |clock_of: &dyn for<'f> Fn(&'f DeviceFindings) -> Clock<'f>, axis: &str| ProcessTracks {
            pid,
            name: name.clone(),
            description: format!("{} (time axis: {axis})", s.name()),
            devices: found_all.iter().map(|f| draw(f, &clock_of(f))).collect(),
        };
    let index = process(
        &|f| Clock::Index {
            events: f.events,
            timed: &f.timed_events,
        },
        "event index, 1 µs per event",
    );
    let time = timed.then(|| {
        process(
            &|f| Clock::Time {
                us: f.times.as_deref().unwrap_or_default(),
            },
            "time_us",
        )
    });
    Ok(FileTracks {
        index,
        time,
        windows_merged: found_all.iter().map(|f| f.windows_merged).sum(),
        ranges_left_out: found_all.iter().map(|f| f.spans_left_out).sum(),
    })
}

impl Session {
    /// This snapshot's timeline alone (one process, as `export --perfetto` draws a file),
    /// for [`perfetto::write`]: in memory, without files.
    ///
    /// ```
    /// use leakscope::export::PerfettoOptions;
    /// use leakscope::session::Session;
    /// let s = Session::open("fixtures/scenarios/fragmentation_oom.pickle", Default::default())?;
    /// let t = s.perfetto(&PerfettoOptions::default())?;
    /// let oom = t.processes[0].devices[0].instants.iter().any(|i| i.name.starts_with("OOM"));
    /// assert!(oom);
    /// # Ok::<(), leakscope::session::SessionError>(())
    /// ```
    pub fn perfetto(&self, opts: &PerfettoOptions) -> Result<Timeline, SessionError> {
        let found = Found {
            file: PathBuf::from(self.name()),
            rank: None,
            step: String::new(),
            step_order: 0,
        };
        let t = file_tracks(
            self,
            &found,
            1,
            opts,
            opts.max_counter_points,
            opts.max_slices,
        )?;
        let timed = t.time.is_some();
        Ok(Timeline {
            processes: vec![t.time.unwrap_or(t.index)],
            metadata: vec![("leakscope.timebase".into(), timebase_note(timed))],
        })
    }
}

/// What the trace's metadata says of its time axis.
fn timebase_note(timed: bool) -> String {
    if timed {
        "time_us: events at their recorded time; files (ranks) aligned by wall clock".to_string()
    } else {
        "event index: not every file carries time_us, so event i of each file is drawn at \
         (i + 1) microseconds and files are aligned by event index"
            .to_string()
    }
}

/// Exports `paths` (snapshot files, and run directories whose snapshots are found as
/// `ranks` finds them) as one Perfetto trace at `out`.
///
/// ```
/// use leakscope::export::{PerfettoOptions, export_perfetto};
/// let out = std::env::temp_dir().join(format!("leakscope-doc-{}.perfetto-trace", std::process::id()));
/// let f = ["fixtures/scenarios/pp_last_stage_recv_pinned.pickle".into()];
/// let written = export_perfetto(&f, &out, &PerfettoOptions::default())?;
/// assert_eq!(written.files_read, 1);
/// assert!(written.instants >= 2); // the peak and the leak's onset
/// # std::fs::remove_file(&out).ok();
/// # Ok::<(), leakscope::export::ExportError>(())
/// ```
pub fn export_perfetto(
    paths: &[PathBuf],
    out: &Path,
    opts: &PerfettoOptions,
) -> Result<PerfettoSummary, ExportError> {
    let (groups, units) = expand(paths);
    let inputs = crate::files::Inputs::of(units.iter().map(|u| &u.found.file));
    inputs.check_output(out)?;
    let mut failed: Vec<Failed> = groups
        .iter()
        .filter_map(|g| {
            let e = g.error.clone()?;
            Some(Failed {
                file: g.dir.as_ref()?.display().to_string(),
                error: e.message,
                kind: e.kind,
            })
        })
        .collect();
    let files = units.len().max(1);
    let points_per_file = opts.max_counter_points / files;
    let slices_per_file = opts.max_slices / files;
    let per_round = rayon::current_num_threads().max(1);
    let threads = units.len() == 1;
    let mut tracks: Vec<FileTracks> = Vec::new();
    for (ri, round) in units.chunks(per_round).enumerate() {
        let done: Vec<Result<FileTracks, Failure>> = round
            .par_iter()
            .enumerate()
            .map(|(i, u)| {
                let s = open(&u.found, &opts.export, threads)?;
                let pid = (ri * per_round + i + 1) as i32;
                file_tracks(&s, &u.found, pid, opts, points_per_file, slices_per_file)
                    .map_err(Failure::from)
            })
            .collect();
        for (r, u) in done.into_iter().zip(round) {
            match r {
                Ok(t) => tracks.push(t),
                Err(e) => failed.push(Failed {
                    file: u.found.file.display().to_string(),
                    error: e.message,
                    kind: e.kind,
                }),
            }
        }
    }
    if tracks.is_empty() {
        return Err(ExportError::NothingRead {
            errors: failed.iter().map(|f| f.error.clone()).collect(),
            kind: failed.first().map_or(ErrorKind::Io, |f| f.kind),
        });
    }
    let timed = tracks.iter().all(|t| t.time.is_some());
    let timebase = if timed { "time_us" } else { "event_index" };
    let (windows_merged, ranges_left_out) = tracks.iter().fold((0, 0), |a, t| {
        (a.0 + t.windows_merged, a.1 + t.ranges_left_out)
    });
    let processes: Vec<ProcessTracks> = tracks
        .into_iter()
        .map(|t| match (timed, t.time) {
            (true, Some(p)) => p,
            _ => t.index,
        })
        .collect();
    let note = timebase_note(timed);
    let timeline = Timeline {
        processes,
        metadata: vec![
            ("leakscope.timebase".into(), note),
            (
                "leakscope.version".into(),
                env!("CARGO_PKG_VERSION").to_string(),
            ),
        ],
    };
    let io = |source| ExportError::Io {
        path: out.to_path_buf(),
        source,
    };
    let buf = inputs.create(out)?;
    let (trace_bytes, file_bytes) = if opts.gzip {
        let mut gz = flate2::write::GzEncoder::new(buf, flate2::Compression::new(6));
        let n = perfetto::write(&timeline, &mut gz).map_err(io)?;
        (n, gz.finish().map_err(io)?.commit()?)
    } else {
        let mut buf = buf;
        let n = perfetto::write(&timeline, &mut buf).map_err(io)?;
        (n, buf.commit()?)
    };
    let mut counter_points = 0u64;
    let mut slices = 0u64;
    let mut instants = 0u64;
    let mut devices = 0u64;
    for p in &timeline.processes {
        for d in &p.devices {
            devices += 1;
            counter_points += d
                .counters
                .iter()
                .map(|c| c.points.len() as u64)
                .sum::<u64>();
            slices += d.slices.iter().map(|s| s.slices.len() as u64).sum::<u64>();
            instants += d.instants.len() as u64;
        }
    }
    Ok(PerfettoSummary {
        schema: SCHEMA,
        out: out.display().to_string(),
        trace_bytes,
        file_bytes,
        timebase,
        files_read: timeline.processes.len() as u64,
        failed,
        devices,
        counter_points,
        slices,
        instants,
        windows_merged,
        ranges_left_out,
    })
}
