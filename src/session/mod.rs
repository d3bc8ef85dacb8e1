//! The session layer: "these files, these options" into reports. Every front end (the
//! command line, the Python binding, the Ray runner, tests, fuzz targets) calls it, so the
//! sequence load → replay → attribute → windows → analysis lives here once.
//!
//! A [`Session`] holds one loaded snapshot. Each report covers every device that has
//! segments or trace events (or the one [`DeviceSelection::Only`] names), each device
//! replayed once into a [`DeviceRun`] that its analyses share; devices are worked on in
//! parallel.
//!
//! ```
//! use leakscope::session::{Options, Session};
//! let s = Session::open("fixtures/scenarios/pp_last_stage_recv_pinned.pickle", Default::default())?;
//! let report = s.leaks(&Options::default())?;
//! let top = &report.devices[0].suspects[0];
//! assert!(top.site.label.ends_with("create_tensor_recv_prev"));
//! # Ok::<(), leakscope::session::SessionError>(())
//! ```

pub mod args;
mod check;
pub mod cluster;
mod compare;
mod compare_steps;
mod discover;
mod error;
mod options;
mod ranks;
mod report;
mod run;
mod series;
mod slice;

use std::path::Path;

use rayon::prelude::*;

use crate::analysis::oom;
use crate::analysis::point::{self, At, Point};

use crate::analysis::summary::{self, Summary};
use crate::analysis::{segments, top, tree};
use crate::attribute::Classification;
use crate::load::{LoadOptions, load_path};
use crate::model::{DeviceView, Snapshot};
use crate::replay::{AllocatorState, Consistency};

/// The default limit on decompressed bytes of a `.gz`/`.zst` input (what
/// `--max-decompressed-bytes` starts from).
pub use crate::load::default_max_decompressed_bytes;
pub use args::OptionArgs;
pub use check::check_options;
pub use compare::{CompareSide, compare, compare_at};
pub use compare_steps::{STEP_ROWS, compare_steps, steps_at};
pub use discover::{Found, Listing, discover, walk};
pub use error::SessionError;
pub use options::{DeviceSelection, DeviceSelectionError, Options};
pub use ranks::{FileRanks, SERIES_MIN_STEPS, TOP_SUSPECTS, analyse_file, merge_ranks, ranks};
pub(crate) use ranks::{device_row, rank_series, row};
pub use report::ReportOptions;
pub use run::DeviceRun;
pub use series::{MIN_SERIES_FILES, SeriesOptions, natural_order, series_files};
pub use slice::{Slice, SliceOptions};

// The reports' types live in `crate::report` (data only, below the session and the output
// stages); they are named here too, where the session's callers have always found them.
pub use crate::report::{
    CheckReport, CompareAtReport, CompareReport, CompareStepsReport, DeviceCheck, DeviceReport,
    FileCheck, GrowthChart, GrowthLine, LeaksReport, Marker, OomReport, PerDevice, PhasesReport,
    RankSeries, RanksReport, ReportData, SegmentsReport, SliceReport, SlicedDevice, Special,
    StepPair, TimelineReport, TopReport, TreeReport, Unpaired, Unresolved, WindowMarks,
    WindowsReport, schema,
};

/// One loaded snapshot and the name it is reported under.
pub struct Session {
    snap: Snapshot,
    name: String,
    /// Set when the snapshot is a series of files stitched together: its windows.
    series: Option<crate::windows::SeriesWindows>,
    /// What did not add up on each device replayed so far (one entry per device).
    checked: std::sync::Mutex<Vec<Consistency>>,
}

/// The devices a report covers and the ones it leaves out as empty.
struct Selected {
    devices: Vec<i64>,
    idle: Vec<i64>,
}

impl Session {
    /// Loads `path`.
    pub fn open(path: impl AsRef<Path>, opts: LoadOptions) -> Result<Session, SessionError> {
        let path = path.as_ref();
        let snap = load_path(path, opts)?;
        Ok(Session::from_snapshot(snap, path.display().to_string()))
    }

    /// Loads `path` and reports it, and its load errors, as `name`: a file opened by
    /// another path than the one it is known by (a cluster node opening a run's file).
    pub fn open_as(path: &Path, name: &Path, opts: LoadOptions) -> Result<Session, SessionError> {
        let snap = load_path(path, opts).map_err(|e| e.with_path(name))?;
        Ok(Session::from_snapshot(snap, name.display().to_string()))
    }

    /// A session over a snapshot already in memory, reported as `name`.
    pub fn from_snapshot(snap: Snapshot, name: impl Into<String>) -> Session {
        Session {
            snap,
            name: name.into(),
            series: None,
            checked: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The devices replayed so far whose trace and final state disagree, or whose input
    /// describes what no allocator does, with the counts (each device once, in index
    /// order). Every front end says so once per device.
    pub fn disagreements(&self) -> Vec<Consistency> {
        let mut v: Vec<Consistency> = self
            .checked
            .lock()
            .map(|c| c.iter().filter(|c| c.disagrees()).cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|c| c.device);
        v
    }

    fn note(&self, runs: &[DeviceRun]) {
        if let Ok(mut checked) = self.checked.lock() {
            for r in runs {
                if !checked.iter().any(|c| c.device == r.device()) {
                    checked.push(Consistency::of(&r.view, &r.replay));
                }
            }
        }
    }

    /// The snapshot as a leakscope cache file's bytes (`convert x.msgpack`).
    pub fn cache_bytes(&self) -> Result<Vec<u8>, crate::error::WriteError> {
        crate::load::cache::encode(self.snapshot())
    }

    /// The snapshot as the JSON of the dict PyTorch pickles (`convert x.json`).
    pub fn write_json(&self, w: impl std::io::Write) -> Result<(), crate::error::WriteError> {
        crate::convert::write_json(self.snapshot(), w)
    }

    /// The snapshot.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// The name reports give the file.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Devices with segments or trace events.
    pub fn active_devices(&self) -> Vec<i64> {
        self.snap
            .devices()
            .iter()
            .filter(|d| !d.segments.is_empty() || !d.trace.is_empty())
            .map(|d| d.device)
            .collect()
    }

    fn select(&self, sel: DeviceSelection) -> Result<Selected, SessionError> {
        let all = self.snap.device_indices();
        let active = self.active_devices();
        let idle = all
            .iter()
            .copied()
            .filter(|d| !active.contains(d))
            .collect();
        match sel {
            DeviceSelection::All => Ok(Selected {
                devices: active,
                idle,
            }),
            DeviceSelection::Only(d) if all.contains(&d) => Ok(Selected {
                devices: vec![d],
                idle: Vec::new(),
            }),
            DeviceSelection::Only(device) => Err(SessionError::NoDevice {
                file: self.name.clone(),
                device,
                available: all,
            }),
        }
    }

    /// The selected devices replayed (in parallel), in index order.
    pub fn runs(&self, opts: &Options) -> Result<Vec<DeviceRun<'_>>, SessionError> {
        Ok(self.runs_of(&self.select(opts.devices)?.devices, opts))
    }

    /// [`Session::runs_of`] without roles ([`DeviceRun::unclassified`]).
    fn unclassified_runs(&self, devices: &[i64], opts: &Options) -> Vec<DeviceRun<'_>> {
        self.runs_made(devices, opts, DeviceRun::unclassified)
    }

    fn runs_of(&self, devices: &[i64], opts: &Options) -> Vec<DeviceRun<'_>> {
        self.runs_made(devices, opts, DeviceRun::new)
    }

    /// The runs of `devices`, each made by `make` (in parallel), in index order.
    fn runs_made<'s>(
        &'s self,
        devices: &[i64],
        opts: &Options,
        make: fn(&'s Snapshot, DeviceView<'s>, &Options, &Classification) -> DeviceRun<'s>,
    ) -> Vec<DeviceRun<'s>> {
        let classes = Classification::new(&self.snap, &opts.filters);
        let views: Vec<_> = self
            .snap
            .devices()
            .into_iter()
            .filter(|v| devices.contains(&v.device))
            .collect();
        let runs: Vec<DeviceRun> = views
            .into_par_iter()
            .map(|v| {
                let mut run = make(&self.snap, v, opts, &classes);
                if let Some(s) = &self.series {
                    run.set_windows(s.windows(run.device(), run.view.trace.len() as u32));
                }
                run
            })
            .collect();
        self.note(&runs);
        runs
    }

    /// Cuts every run's windows; an error when `--within` matched on none of them.
    pub(crate) fn cut_windows(
        &self,
        runs: &mut [DeviceRun],
        opts: &Options,
    ) -> Result<(), SessionError> {
        runs.par_iter_mut().for_each(|r| {
            r.windows();
        });
        match &opts.within {
            Some(w) if !runs.is_empty() && runs.iter().all(|r| !r.within_matched()) => {
                Err(SessionError::NoWithin {
                    file: self.name.clone(),
                    within: w.to_string(),
                })
            }
            _ => Ok(()),
        }
    }

    fn per_device<T>(&self, schema: &'static str, devices: Vec<T>, idle: Vec<i64>) -> PerDevice<T> {
        PerDevice {
            schema,
            file: self.name.clone(),
            at: None,
            by: None,
            devices,
            unresolved: Vec::new(),
            idle_devices: idle,
            disagreements: self.disagreements(),
        }
    }

    /// `summary`: what the file holds, per device and in total.
    pub fn summary(&self) -> Summary {
        summary::summarize(&self.snap, &self.name)
    }

    /// `leaks`: the sites that grow per window, on every selected device.
    pub fn leaks(&self, opts: &Options) -> Result<LeaksReport, SessionError> {
        let sel = self.select(opts.devices)?;
        let mut runs = self.runs_of(&sel.devices, opts);
        self.cut_windows(&mut runs, opts)?;
        let mut devices: Vec<_> = runs.par_iter_mut().map(|r| r.find_leaks()).collect();
        crate::analysis::leaks::mark_units(&mut devices);
        Ok(self
            .per_device(schema::LEAKS, devices, sel.idle)
            .grouped(opts.by))
    }

    /// `windows`: how each selected device's trace is cut, and why.
    pub fn windows(&self, opts: &Options) -> Result<WindowsReport, SessionError> {
        let sel = self.select(opts.devices)?;
        let mut runs = self.runs_of(&sel.devices, opts);
        self.cut_windows(&mut runs, opts)?;
        let devices = runs.iter_mut().map(|r| r.windows().clone()).collect();
        Ok(self.per_device(schema::WINDOWS, devices, sel.idle))
    }

    /// `phases`: the live bytes at the start, peak and end of each `record_function`
    /// range of every selected device.
    pub fn phases(&self, opts: &Options) -> Result<PhasesReport, SessionError> {
        let sel = self.select(opts.devices)?;
        let runs = self.unclassified_runs(&sel.devices, opts);
        let devices = runs
            .par_iter()
            .map(|r| crate::analysis::phases::phases(&self.snap, r.device(), &r.replay))
            .collect();
        Ok(self.per_device(schema::PHASES, devices, sel.idle))
    }

    /// Resolves `at` on every run; an error when it exists on none.
    pub(crate) fn points(
        &self,
        runs: &[DeviceRun],
        at: At,
    ) -> Result<(Vec<Option<Point>>, Vec<Unresolved>), SessionError> {
        let mut points = Vec::with_capacity(runs.len());
        let mut unresolved = Vec::new();
        for r in runs {
            match point::resolve(&self.snap, &r.replay, at) {
                Ok(p) => points.push(Some(p)),
                Err(reason) => {
                    points.push(None);
                    unresolved.push(Unresolved {
                        device: r.device(),
                        reason,
                    });
                }
            }
        }
        if !runs.is_empty() && points.iter().all(Option::is_none) {
            return Err(SessionError::NoPoint {
                file: self.name.clone(),
                at,
                reasons: unresolved.into_iter().map(|u| u.reason).collect(),
            });
        }
        Ok((points, unresolved))
    }

    /// `f` of every selected device's run at `at`, where the point exists, as a report
    /// under `schema` that names the devices where it does not.
    fn at_point<T: Send>(
        &self,
        schema: &'static str,
        opts: &Options,
        at: At,
        f: impl Fn(&mut DeviceRun, Point) -> T + Sync,
    ) -> Result<PerDevice<T>, SessionError> {
        let sel = self.select(opts.devices)?;
        let mut runs = self.runs_of(&sel.devices, opts);
        let (points, unresolved) = self.points(&runs, at)?;
        let found = runs
            .par_iter_mut()
            .zip(points)
            .filter_map(|(r, p)| Some(f(r, p?)))
            .collect();
        Ok(self.per_device(schema, found, sel.idle).at(at, unresolved))
    }

    /// `top`: what holds memory at `at` on every selected device, `limit` rows each.
    pub fn top(&self, opts: &Options, at: At, limit: usize) -> Result<TopReport, SessionError> {
        let r = self.at_point(schema::TOP, opts, at, |r, p| {
            top::top(&r.replay, p, &mut r.attr, limit)
        })?;
        Ok(r.grouped(opts.by))
    }

    /// Every site holding memory at `at` on every selected device, each with the stack
    /// of its largest live allocation: one side of `compare --at`.
    pub fn holders_at(&self, opts: &Options, at: At) -> Result<TopReport, SessionError> {
        let r = self.at_point(schema::TOP, opts, at, |r, p| {
            top::top_with_stacks(&r.replay, p, &mut r.attr, usize::MAX)
        })?;
        Ok(r.grouped(opts.by))
    }

    /// `tree`: the call tree of the memory live at `at` on every selected device.
    pub fn tree(&self, opts: &Options, at: At) -> Result<TreeReport, SessionError> {
        self.at_point(schema::TREE, opts, at, |r, p| {
            tree::tree(&r.replay, p, &mut r.attr)
        })
    }

    /// `timeline`: every allocation of each selected device over its trace, the
    /// `max_allocations` largest (bytes x lifetime) one by one and the rest summed.
    pub fn timeline(
        &self,
        opts: &Options,
        max_allocations: usize,
    ) -> Result<TimelineReport, SessionError> {
        use crate::analysis::allocations::{choose, describe};
        let sel = self.select(opts.devices)?;
        let mut runs = self.unclassified_runs(&sel.devices, opts);
        // Roles are read for the drawn allocations alone: classified for those only.
        let devices = runs
            .par_iter_mut()
            .map(|r| {
                let choice = choose(&r.replay, max_allocations);
                let (snap, view) = (self.snapshot(), &r.view);
                let map = crate::attribute::roles::classify_some(
                    snap,
                    view.device,
                    view.trace,
                    &r.replay,
                    &opts.roles,
                    choice.is_drawn(),
                );
                r.attr.set_roles(map);
                describe(view.device, view.trace, &r.replay, &mut r.attr, choice)
            })
            .collect();
        Ok(self.per_device(schema::TIMELINE, devices, sel.idle))
    }

    /// `segments`: the segment map at `at` on every selected device.
    pub fn segments(&self, opts: &Options, at: At) -> Result<SegmentsReport, SessionError> {
        self.at_point(schema::SEGMENTS, opts, at, |r, p| {
            let state = match at {
                At::End => AllocatorState::at_end(&r.view),
                _ => AllocatorState::after(&r.view, &r.replay, p.event_index),
            };
            let mut map = segments::segments(r.device(), p, &state);
            crate::analysis::pools::name_creators(r.snapshot(), &r.view, &mut map.pools);
            map
        })
    }

    /// `oom`: why an allocation failed on each device with an `oom` event, with what grew
    /// in the windows before. A file without one is answered from its final state (each
    /// selected device's memory at the end and who holds it, with their roles).
    pub fn oom(&self, opts: &Options) -> Result<OomReport, SessionError> {
        let sel = self.select(opts.devices)?;
        let failed: Vec<i64> = oom::oom_devices(&self.snap)
            .into_iter()
            .filter(|d| sel.devices.contains(d))
            .collect();
        if failed.is_empty() {
            let mut runs = self.runs_of(&sel.devices, opts);
            let devices = runs
                .par_iter_mut()
                .map(|r| oom::explain_end(&self.snap, &r.view, &r.replay, &mut r.attr))
                .collect();
            return Ok(self.per_device(schema::OOM, devices, sel.idle));
        }
        let mut runs = self.runs_of(&failed, opts);
        self.cut_windows(&mut runs, opts)?;
        let devices = runs.par_iter_mut().map(|r| r.explain_oom()).collect();
        Ok(self.per_device(schema::OOM, devices, sel.idle))
    }

    /// The data of the HTML report: every selected device's timeline, leaks, holders and
    /// OOM, computed once.
    pub fn report(
        &self,
        opts: &Options,
        ropts: &ReportOptions,
    ) -> Result<ReportData, SessionError> {
        let sel = self.select(opts.devices)?;
        let mut runs = self.runs_of(&sel.devices, opts);
        self.cut_windows(&mut runs, opts)?;
        // The flame graph shows Python frames first; the full stacks are a click away.
        let mut python = opts.filters.clone();
        python.python_only = true;
        let python = Classification::new(&self.snap, &python);
        // The summary is independent of the runs: made meanwhile.
        let (devices, summary) = rayon::join(
            || {
                runs.par_iter_mut()
                    .map(|r| report::device_report(r, ropts, &python))
                    .collect()
            },
            || self.summary(),
        );
        Ok(ReportData {
            schema: schema::REPORT,
            file: self.name.clone(),
            summary,
            devices,
            idle_devices: sel.idle,
            disagreements: self.disagreements(),
        })
    }
}

/// How the session fills in a report over a file's devices.
impl<T> PerDevice<T> {
    /// The same report, grouped by `by`.
    pub(crate) fn grouped(mut self, by: crate::attribute::GroupBy) -> Self {
        self.by = Some(by);
        self
    }

    /// The same report, of the point `at` (missing on the `unresolved` devices).
    pub(crate) fn at(mut self, at: At, unresolved: Vec<Unresolved>) -> Self {
        self.at = Some(at);
        self.unresolved = unresolved;
        self
    }
}
