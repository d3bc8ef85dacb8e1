//! leakscope's Python binding: a thin layer over the session layer. Every report leaves
//! as a result object (`result.rs`) holding the JSON the command line prints (`--json`)
//! and its text; options arrive as the strings the command line takes and are parsed by
//! the same `FromStr` implementations. Loading and analysing run without the GIL.

mod result;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use leakscope::attribute::roles::RoleRules;
use leakscope::budget::gate::{MEMORY_MEASURES, memory_measure};
use leakscope::budget::{Baseline, Budget};
use leakscope::export;
use leakscope::render::{self, Style, Text};
use leakscope::session::cluster::dispatch;
use leakscope::session::{self, CheckReport, Options, ReportOptions, Session, SessionError};
use leakscope::{ErrorKind, LoadError, LoadOptions};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use result::{Checked, Report};

/// The Python exception for a library error of `kind`: `leakscope._errors.error` picks
/// the class (one per kind, under `LeakscopeError`), so the mapping is said once.
fn kind_error(kind: ErrorKind, message: String) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("leakscope._errors")
            .and_then(|m| m.getattr("error"))
            .and_then(|f| f.call1((kind.as_str(), message)));
        match made {
            Ok(e) => PyErr::from_value(e),
            Err(e) => e,
        }
    })
}

/// A bad argument: `leakscope.UsageError` (a `ValueError`).
fn usage(message: String) -> PyErr {
    kind_error(ErrorKind::Usage, message)
}

fn load_error(e: LoadError) -> PyErr {
    kind_error(e.kind(), e.to_string())
}

fn session_error(e: SessionError) -> PyErr {
    kind_error(e.kind(), e.to_string())
}

fn json_error(e: serde_json::Error) -> PyErr {
    PyRuntimeError::new_err(format!("cannot write the report as JSON: {e}"))
}

fn parse<T: FromStr>(value: &str, what: &str) -> PyResult<T>
where
    T::Err: std::fmt::Display,
{
    value
        .parse()
        .map_err(|e| usage(format!("{what}={value:?}: {e}")))
}

/// A `[roles]` file (`roles=PATH`, as `--roles`), read with the library's size limit and
/// compiled by [`RoleRules::from_toml`].
fn roles_file(path: &Path) -> PyResult<Arc<RoleRules>> {
    let text = leakscope::files::read_small_text(path).map_err(|e| match e {
        leakscope::files::SmallTextError::Io(io) => PyErr::from(io),
        other => usage(format!("roles={}: {other}", path.display())),
    })?;
    RoleRules::from_toml(&text)
        .map(Arc::new)
        .map_err(|e| usage(format!("roles={}: {e}", path.display())))
}

/// Takes a keyword the command needs (the Python layer passes every one, defaults
/// included) out of `kw`, leaving the analysis options.
fn need<'py, T: pyo3::conversion::FromPyObjectOwned<'py>>(
    kw: &Bound<'py, PyDict>,
    key: &str,
) -> PyResult<T> {
    let v = kw
        .get_item(key)?
        .ok_or_else(|| usage(format!("`{key}` is missing")))?;
    kw.del_item(key)?;
    v.extract::<T>()
        .map_err(|e| usage(format!("{key}={v}: {}", Into::<PyErr>::into(e))))
}

/// Takes an optional keyword out of `kw` (`None`: absent or `None`).
fn maybe<'py, T: pyo3::conversion::FromPyObjectOwned<'py>>(
    kw: &Bound<'py, PyDict>,
    key: &str,
) -> PyResult<Option<T>> {
    match kw.get_item(key)? {
        Some(v) => {
            kw.del_item(key)?;
            if v.is_none() {
                return Ok(None);
            }
            v.extract::<T>()
                .map(Some)
                .map_err(|e| usage(format!("{key}={v}: {}", Into::<PyErr>::into(e))))
        }
        None => Ok(None),
    }
}

/// A copy of the keywords a function was given (the function takes its own out of it).
fn owned<'py>(py: Python<'py>, kw: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyDict>> {
    kw.map_or_else(|| Ok(PyDict::new(py)), |k| k.copy())
}

/// The session's options from what is left of the keyword arguments, read into the
/// fields the command line's flags are (`session::OptionArgs`: the same names, defaults
/// and parsers; `roles` the path of a TOML file with a `[roles]` table).
fn options(o: &Bound<'_, PyDict>) -> PyResult<Options> {
    // The roles file is read here, so that a file that cannot be read is an `OSError`
    // (ReadError) as every other unreadable file is, not a usage error.
    let roles = o.get_item("roles")?;
    if roles.is_some() {
        o.del_item("roles")?;
    }
    let args: session::OptionArgs =
        pythonize::depythonize(o.as_any()).map_err(|e| usage(e.to_string()))?;
    if let Some(name) = args.unknown.keys().next() {
        return Err(usage(format!("`{name}` is no option of leakscope")));
    }
    let mut opts = args.options();
    if let Some(path) = roles {
        opts.roles = roles_file(&path.extract::<PathBuf>()?)?;
    }
    Ok(opts)
}

/// Keywords of the Python call of `command`: each argument the command line takes
/// (`params`) but its positional ones and those Python has elsewhere (`load`'s
/// `max_decompressed_bytes`, `load_series`' `rank`, `CheckResult.junit`), `output` named
/// `path` and unset by default; for `export`, those `--{output}` allows.
#[pyfunction]
#[pyo3(signature = (command, output=None))]
fn params<'py>(
    py: Python<'py>,
    command: &str,
    output: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    use leakscope::cli::params as p;
    let cmd = p::command(command).ok_or_else(|| usage(format!("no command `{command}`")))?;
    let outputs = ["parquet", "perfetto", "pprof"];
    let kept: Vec<p::Param> = p::params(&cmd)
        .into_iter()
        .filter(|a| !a.positional)
        .filter(|a| !["max_decompressed_bytes", "rank", "junit"].contains(&a.name.as_str()))
        .filter(|a| !outputs.contains(&a.name.as_str()))
        .filter(|a| output.is_none_or(|o| p::allowed_with(command, a, o)))
        .map(|mut a| {
            if a.name == "output" {
                a.name = "path".into();
                a.default = None;
            }
            a
        })
        .collect();
    to_python(py, &kept)
}

/// A command's description, the line its `--help` starts with (what Python's help shows
/// above a call's own notes).
#[pyfunction]
fn about(command: &str) -> PyResult<String> {
    let cmd = leakscope::cli::params::command(command)
        .ok_or_else(|| usage(format!("no command `{command}`")))?;
    Ok(cmd.get_about().map(|a| a.to_string()).unwrap_or_default())
}

fn load_options(max_decompressed_bytes: Option<u64>) -> LoadOptions<'static> {
    let mut o = LoadOptions::default();
    if let Some(m) = max_decompressed_bytes {
        o.max_decompressed_bytes = m;
    }
    o
}

/// A loaded snapshot and what its analyses share (see `leakscope.Snapshot`).
#[pyclass(frozen, module = "leakscope._native")]
struct NativeSession {
    inner: Arc<Session>,
    /// The file it was loaded from, which no output may overwrite.
    source: Option<PathBuf>,
}

impl NativeSession {
    fn new(s: Session) -> Self {
        NativeSession {
            inner: Arc::new(s),
            source: None,
        }
    }

    /// Runs `f` on the session without the GIL: `command`'s result.
    fn report<T: serde::Serialize + Text + Send>(
        &self,
        py: Python<'_>,
        command: &str,
        f: impl FnOnce(&Session) -> Result<T, SessionError> + Send,
    ) -> PyResult<Report> {
        let s = &self.inner;
        let r = py.detach(|| f(s)).map_err(session_error)?;
        Report::of(command, &r)
    }
}

/// A report as Python receives it: the JSON `--json` prints, and the text the command
/// prints without colour (`str()` of the result).
fn both<T: serde::Serialize + Text>(r: &T) -> PyResult<(String, String)> {
    let json = serde_json::to_string(r).map_err(json_error)?;
    Ok((json, r.text(Style { color: false })))
}

fn at(at: &str) -> PyResult<leakscope::analysis::At> {
    parse(at, "at")
}

#[pymethods]
impl NativeSession {
    /// The file name (or the name given for bytes and objects).
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// The loader's warnings.
    fn warnings(&self) -> Vec<String> {
        self.inner.snapshot().warnings.clone()
    }

    /// The snapshot in one line (`repr`): devices as the reports count them, bytes,
    /// events.
    fn describe(&self, py: Python<'_>) -> String {
        let s = &self.inner;
        py.detach(|| render::summary::line(&s.summary()))
    }

    /// Runs `command` (`summary`, `leaks`, `windows`, `phases`, `top`, `tree`,
    /// `segments`, `timeline` or `oom`) with its keywords (all of [`params`]' for it,
    /// defaults included): the report's JSON and its text.
    fn run(&self, py: Python<'_>, command: &str, kw: &Bound<'_, PyDict>) -> PyResult<Report> {
        let kw = kw.copy()?;
        let point = |kw: &Bound<'_, PyDict>| at(&need::<String>(kw, "at")?);
        match command {
            "summary" => self.report(py, command, |s| Ok(s.summary())),
            "leaks" => {
                let o = options(&kw)?;
                self.report(py, command, move |s| s.leaks(&o))
            }
            "windows" => {
                let o = options(&kw)?;
                self.report(py, command, move |s| s.windows(&o))
            }
            "phases" => {
                let o = options(&kw)?;
                self.report(py, command, move |s| s.phases(&o))
            }
            "oom" => {
                let o = options(&kw)?;
                self.report(py, command, move |s| s.oom(&o))
            }
            "top" => {
                let (a, limit) = (point(&kw)?, need::<usize>(&kw, "limit")?);
                let o = options(&kw)?;
                self.report(py, command, move |s| s.top(&o, a, limit))
            }
            "segments" => {
                let a = point(&kw)?;
                let o = options(&kw)?;
                self.report(py, command, move |s| s.segments(&o, a))
            }
            "timeline" => {
                let most = need::<usize>(&kw, "max_allocations")?;
                let o = options(&kw)?;
                self.report(py, command, move |s| s.timeline(&o, most))
            }
            "tree" => {
                let (a, share) = (point(&kw)?, need::<f64>(&kw, "min_share")?);
                let o = options(&kw)?;
                o.by.for_tree().map_err(|e| usage(format!("by: {e}")))?;
                let s = &self.inner;
                let r = py.detach(|| s.tree(&o, a)).map_err(session_error)?;
                let json = render::json::tree(&r).map_err(json_error)?;
                Report::from_json(
                    command,
                    json,
                    render::tree::text(&r, share, Style { color: false }),
                )
            }
            other => Err(usage(format!("`{other}` is no command of Snapshot.run"))),
        }
    }

    /// `leaks` with its keywords, judged against `limit` bytes per window: the report's
    /// JSON, and why it fails the limit (`None`: it holds; see
    /// `render::leak_limit::failure`).
    fn leaks_over(
        &self,
        py: Python<'_>,
        limit: u64,
        kw: &Bound<'_, PyDict>,
    ) -> PyResult<(String, Option<String>)> {
        let kw = kw.copy()?;
        let spec: String = need(&kw, "windows")?;
        kw.set_item("windows", &spec)?;
        let o = options(&kw)?;
        let s = &self.inner;
        let r = py.detach(|| s.leaks(&o)).map_err(session_error)?;
        let json = serde_json::to_string(&r).map_err(json_error)?;
        Ok((json, render::leak_limit::failure(&r, limit, &spec)))
    }

    /// Each device's figure of `measure` (one of the budget's `[memory]` measures; only
    /// `device` when given), and why it fails `limit` bytes (`None`: it holds; see
    /// `render::memory_limit::failure`). The figures are those `check` measures.
    #[pyo3(signature = (measure, limit, device=None))]
    fn memory_over(
        &self,
        py: Python<'_>,
        measure: &str,
        limit: u64,
        device: Option<i64>,
    ) -> PyResult<(BTreeMap<i64, u64>, Option<String>)> {
        let Some(m) = memory_measure(measure) else {
            let names: Vec<&str> = MEMORY_MEASURES.iter().map(|m| m.name).collect();
            return Err(usage(format!(
                "what must be one of {}, not {measure:?}",
                names.join(", ")
            )));
        };
        // The gate measures every figure whatever its limits; the limit is judged below.
        let budget = Budget::default();
        let opts = session::check_options(&budget, None, &Options::default());
        let s = &self.inner;
        let file = py
            .detach(|| s.check(&budget, None, &opts))
            .map_err(session_error)?;
        let figures: Vec<(i64, u64)> = file
            .devices
            .iter()
            .filter(|d| device.is_none_or(|x| x == d.device))
            .map(|d| (d.device, (m.of)(&d.measured)))
            .collect();
        if let (Some(x), true) = (device, figures.is_empty()) {
            return Err(usage(format!("the snapshot has no device {x}")));
        }
        let failure = render::memory_limit::failure(&figures, measure, limit);
        Ok((figures.into_iter().collect(), failure))
    }

    /// Folded stacks (`folded`) or an SVG, as text; also written whole to `out` when
    /// given (never over the snapshot's own file).
    #[pyo3(signature = (kw, out=None))]
    fn flamegraph(
        &self,
        py: Python<'_>,
        kw: &Bound<'_, PyDict>,
        out: Option<PathBuf>,
    ) -> PyResult<String> {
        let kw = kw.copy()?;
        let (a, folded) = (
            at(&need::<String>(&kw, "at")?)?,
            need::<bool>(&kw, "folded")?,
        );
        let o = options(&kw)?;
        let s = &self.inner;
        let text = py.detach(|| {
            let r = s.tree(&o, a).map_err(session_error)?;
            let lines = render::flamegraph::report_lines(&r);
            if folded {
                return Ok(render::flamegraph::folded_text(&lines));
            }
            let svg = render::flamegraph::report_svg(&r, &lines, o.filters.focus.is_some())
                .map_err(|e| {
                    PyRuntimeError::new_err(format!("cannot draw the flame graph: {e}"))
                })?;
            String::from_utf8(svg).map_err(|e| PyRuntimeError::new_err(e.to_string()))
        })?;
        if let Some(out) = out {
            write_output(py, out, text.as_bytes(), Vec::new(), Some(self))?;
        }
        Ok(text)
    }

    /// The report's data; with `out`, the HTML page is written there whole (never over
    /// the snapshot's own file) and the text is the line the command prints then.
    #[pyo3(signature = (kw, out=None))]
    fn report_page(
        &self,
        py: Python<'_>,
        kw: &Bound<'_, PyDict>,
        out: Option<PathBuf>,
    ) -> PyResult<Report> {
        let kw = kw.copy()?;
        let mut report_opts = ReportOptions::default();
        report_opts.max_allocations = need(&kw, "max_allocations")?;
        let o = options(&kw)?;
        let s = &self.inner;
        let (json, text, page) = py.detach(|| -> PyResult<_> {
            let data = s.report(&o, &report_opts).map_err(session_error)?;
            let json = serde_json::to_string(&data).map_err(json_error)?;
            let Some(out) = &out else {
                return Ok((json, String::new(), None));
            };
            let svgs = render::flamegraph::report_page_svgs(&data).map_err(|e| {
                PyRuntimeError::new_err(format!("cannot draw the flame graph: {e}"))
            })?;
            let page = render::html::page(&data, &json, &svgs);
            let text = render::html::written(out, &data, page.len());
            Ok((json, text, Some(page)))
        })?;
        if let (Some(out), Some(page)) = (out, page) {
            write_output(py, out, page.as_bytes(), Vec::new(), Some(self))?;
        }
        Report::from_json("report", json, text)
    }
}

/// Loads a snapshot file (pickle, JSON or leakscope cache; plain, gzip or zstd).
#[pyfunction]
#[pyo3(signature = (path, max_decompressed_bytes=None))]
fn load_path(
    py: Python<'_>,
    path: PathBuf,
    max_decompressed_bytes: Option<u64>,
) -> PyResult<NativeSession> {
    let s = py
        .detach(|| Session::open(&path, load_options(max_decompressed_bytes)))
        .map_err(session_error)?;
    let mut native = NativeSession::new(s);
    native.source = Some(path);
    Ok(native)
}

/// Loads files, one per step, as a series: the changes between consecutive files are
/// the windows (read in the order of the numbers in their names).
#[pyfunction]
#[pyo3(signature = (paths, max_decompressed_bytes=None))]
fn load_series(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    max_decompressed_bytes: Option<u64>,
) -> PyResult<NativeSession> {
    let mut o = session::SeriesOptions::default();
    if let Some(m) = max_decompressed_bytes {
        o.max_decompressed_bytes = m;
    }
    let s = py
        .detach(|| Session::open_series(&paths, o))
        .map_err(session_error)?;
    Ok(NativeSession::new(s))
}

/// The files of a run directory that form one rank's series, in step order.
#[pyfunction]
#[pyo3(signature = (dir, rank=None))]
fn series_files(dir: PathBuf, rank: Option<u64>) -> PyResult<Vec<PathBuf>> {
    session::series_files(&dir, rank).map_err(session_error)
}

/// Loads a snapshot held in a `bytes` object (read in place, not copied).
#[pyfunction]
#[pyo3(signature = (data, name, max_decompressed_bytes=None))]
fn load_bytes(
    py: Python<'_>,
    data: &Bound<'_, PyBytes>,
    name: String,
    max_decompressed_bytes: Option<u64>,
) -> PyResult<NativeSession> {
    let bytes = data.as_bytes();
    let snap = py
        .detach(|| leakscope::load_bytes(bytes, load_options(max_decompressed_bytes)))
        .map_err(|e| load_error(e.with_path(&name)))?;
    Ok(NativeSession::new(Session::from_snapshot(snap, name)))
}

/// Builds a snapshot from the object `torch.cuda.memory._snapshot()` returns (a dict, or
/// a list of segments), walking it in place.
#[pyfunction]
fn from_object(obj: &Bound<'_, PyAny>, name: String) -> PyResult<NativeSession> {
    let de = pythonize::Depythonizer::from_object(obj);
    let snap = leakscope::load::load_deserializer(&mut { de }, leakscope::model::Container::Object)
        .map_err(load_error)?;
    Ok(NativeSession::new(Session::from_snapshot(snap, name)))
}

/// Two runs side by side (`leakscope compare A B`): two loaded snapshots (or paths,
/// loaded here), or two run directories step by step with `at`. The result's command is
/// `compare`, `compare_at` or `compare_steps`.
#[pyfunction]
#[pyo3(signature = (a, b, kw=None))]
fn compare(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    kw: Option<&Bound<'_, PyDict>>,
) -> PyResult<Report> {
    let kw = owned(py, kw)?;
    let point = maybe::<String>(&kw, "at")?.map(|p| at(&p)).transpose()?;
    let o = options(&kw)?;
    if let (Ok(pa), Ok(pb)) = (a.extract::<PathBuf>(), b.extract::<PathBuf>())
        && let Some(p) = session::steps_at(&pa, &pb, point).map_err(session_error)?
    {
        let r = py
            .detach(|| session::compare_steps(&pa, &pb, &o, p))
            .map_err(session_error)?;
        return Report::of("compare_steps", &r);
    }
    let (sa, sb) = (side(py, a)?, side(py, b)?);
    if let Some(p) = point {
        let r = py.detach(|| -> PyResult<_> {
            let ta = sa.holders_at(&o, p).map_err(session_error)?;
            let tb = sb.holders_at(&o, p).map_err(session_error)?;
            Ok(session::compare_at(&ta, &tb, p))
        })?;
        return Report::of("compare_at", &r);
    }
    let r = py.detach(|| -> PyResult<_> {
        let side_a = sa.compare_side(&o).map_err(session_error)?;
        let side_b = sb.compare_side(&o).map_err(session_error)?;
        Ok(session::compare(&side_a, &side_b))
    })?;
    Report::of("compare", &r)
}

/// One side of `compare`: a loaded snapshot, or a path loaded now.
fn side(py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<Arc<Session>> {
    if let Ok(s) = x.cast::<NativeSession>() {
        return Ok(s.get().inner.clone());
    }
    let path: PathBuf = x.extract()?;
    let s = py
        .detach(|| Session::open(&path, LoadOptions::default()))
        .map_err(session_error)?;
    Ok(Arc::new(s))
}

/// Every rank and step below a directory (`leakscope ranks DIR`).
#[pyfunction]
#[pyo3(signature = (dir, kw=None))]
fn ranks(py: Python<'_>, dir: PathBuf, kw: Option<&Bound<'_, PyDict>>) -> PyResult<Report> {
    let o = options(&owned(py, kw)?)?;
    let r = py
        .detach(|| session::ranks(&dir, &o))
        .map_err(session_error)?;
    Report::of("ranks", &r)
}

/// The snapshots below `root` as this machine sees them, named without `prefix`: a dict
/// of `session::cluster::NodeListing`, or `None` when `root` is no directory here.
#[pyfunction]
fn list_here(py: Python<'_>, root: PathBuf, prefix: PathBuf) -> PyResult<Bound<'_, PyAny>> {
    let listing = py
        .detach(|| session::cluster::list_here(&root, &prefix))
        .map_err(session_error)?;
    to_python(py, &listing)
}

/// `v` as Python objects (dicts, lists, numbers, strings).
fn to_python<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// `v` read as `T`, a usage error naming `what` when it does not fit.
fn from_python<T: serde::de::DeserializeOwned>(v: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    pythonize::depythonize(v).map_err(|e| usage(format!("{what}: {e}")))
}

/// One file of a run (`found`: an entry of [`list_here`]'s files, opened below
/// `prefix`): its rows and each device's largest suspects, as JSON, the file named as
/// found. Never raises for a bad file: its row says why.
#[pyfunction]
#[pyo3(signature = (found, prefix, opts=None, threads=true))]
fn analyse_found(
    py: Python<'_>,
    found: &Bound<'_, PyAny>,
    prefix: PathBuf,
    opts: Option<&Bound<'_, PyDict>>,
    threads: bool,
) -> PyResult<String> {
    let f: session::Found = from_python(found, "found")?;
    let o = options(&owned(py, opts)?)?;
    let r = py.detach(|| session::cluster::analyse_found(&f, &prefix, &o, threads));
    serde_json::to_string(&r).map_err(json_error)
}

/// The listings of several machines (`[(machine, listing), ...]`, each listing from
/// [`list_here`]) as one run: each distinct file once with the machines that hold it, the
/// skipped files and whether all machines share one folder (a dict of
/// `session::cluster::RunListing`). `asked`: how many machines were asked.
#[pyfunction]
fn merge_listings<'py>(
    py: Python<'py>,
    listed: &Bound<'py, PyAny>,
    asked: usize,
    by_identity: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let listed: Vec<(String, session::cluster::NodeListing)> = from_python(listed, "listings")?;
    to_python(
        py,
        &session::cluster::merge_listings(&listed, asked, by_identity),
    )
}

/// Which machine runs which job of a run (`session::cluster::dispatch`): `leakscope.ray`
/// starts what `start()` names and says how each job ended.
#[pyclass(module = "leakscope._native")]
struct Dispatch(dispatch::Dispatch);

#[pymethods]
impl Dispatch {
    /// `jobs`: each job's holders and size; `limits`: each machine with the jobs it runs
    /// at once.
    #[new]
    fn new(jobs: Vec<(Vec<String>, u64)>, limits: Vec<(String, usize)>) -> Self {
        let jobs = jobs
            .into_iter()
            .map(|(holders, size)| dispatch::Job { holders, size })
            .collect();
        Dispatch(dispatch::Dispatch::new(jobs, limits))
    }
    /// The jobs to start now, each with its machine.
    fn start(&mut self) -> Vec<(usize, String)> {
        self.0.start()
    }
    fn succeeded(&mut self, job: usize) {
        self.0.succeeded(job)
    }
    fn failed(&mut self, job: usize, error: String, machine_left: bool) {
        self.0.failed(job, error, machine_left)
    }
    fn lost(&mut self, job: usize, error: String) {
        self.0.lost(job, error)
    }
    /// The jobs that ended without a result since the last call: `(job, machine, error)`.
    fn take_ended(&mut self) -> Vec<(usize, String, String)> {
        self.0
            .take_ended()
            .into_iter()
            .map(|e| (e.job, e.machine, e.error))
            .collect()
    }
    fn alive(&self, machine: &str) -> bool {
        self.0.alive(machine)
    }
    fn done(&self) -> bool {
        self.0.done()
    }
}

/// Who exports which job (`session::cluster::dispatch::export_shares`): per machine with
/// work, `(machine, jobs, whole, bytes)`.
#[pyfunction]
#[pyo3(signature = (jobs, machines, here, shared))]
fn export_shares(
    jobs: Vec<(Vec<String>, u64)>,
    machines: Vec<String>,
    here: Option<String>,
    shared: bool,
) -> Vec<(String, Vec<usize>, bool, u64)> {
    let jobs: Vec<dispatch::Job> = jobs
        .into_iter()
        .map(|(holders, size)| dispatch::Job { holders, size })
        .collect();
    dispatch::export_shares(&jobs, &machines, here.as_deref(), shared)
        .into_iter()
        .map(|s| (s.machine, s.jobs, s.whole, s.size))
        .collect()
}

/// A file of a run as the driver received it: its rows, or why it has none.
#[derive(serde::Deserialize)]
struct Analysed {
    found: session::Found,
    rows: Option<Vec<leakscope::analysis::ranks::RankRow>>,
    error: Option<String>,
}

/// A run's report (`leakscope.ranks/5`) from each file's rows or error (a list of
/// `{found, rows, error}`), computed wherever: in discover's order, outliers flagged,
/// trends drawn.
#[pyfunction]
fn merge_found(dir: PathBuf, files: &Bound<'_, PyAny>, skipped: u64) -> PyResult<(String, String)> {
    let files: Vec<Analysed> = from_python(files, "files")?;
    let files = files
        .into_iter()
        .map(|a| {
            let rows = match (a.error, a.rows) {
                (Some(e), _) => Err(e),
                (None, rows) => Ok(rows.unwrap_or_default()),
            };
            (a.found, rows)
        })
        .collect();
    let r = session::cluster::merge_found(&dir, files, skipped).map_err(session_error)?;
    both(&r)
}

/// Files and run directories into Parquet tables in `out_dir` (`leakscope export
/// --parquet`); returns what was written (`leakscope.export/1`: the tables with
/// their row counts, the files read and those that could not be).
#[pyfunction]
#[pyo3(signature = (paths, out_dir, opts=None))]
fn export_parquet<'py>(
    py: Python<'py>,
    paths: &Bound<'py, PyAny>,
    out_dir: PathBuf,
    opts: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let paths = self::paths(paths)?;
    let analysis = options(&owned(py, opts)?)?;
    let mut opts = export::ExportOptions::default();
    opts.analysis = analysis;
    exported(
        py,
        py.detach(|| export::export_parquet(&paths, &out_dir, &opts)),
    )
}

/// Files and run directories as one Perfetto trace at `out` (`leakscope export
/// --perfetto`; gzipped when `out` ends in `.gz`); returns what was written
/// (`leakscope.export.perfetto/1`).
#[pyfunction]
fn export_perfetto<'py>(
    py: Python<'py>,
    paths: &Bound<'py, PyAny>,
    out: PathBuf,
    kw: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    let paths = self::paths(paths)?;
    let kw = kw.copy()?;
    let top_sites = need::<usize>(&kw, "top_sites")?;
    // The command line's range (`--top-sites`, 0 to 254).
    if top_sites > 254 {
        return Err(usage(format!("top_sites={top_sites}: use 0 to 254")));
    }
    let analysis = options(&kw)?;
    let mut opts = export::PerfettoOptions::default();
    opts.export.analysis = analysis;
    opts.top_sites = top_sites;
    opts.gzip = out.extension().is_some_and(|e| e == "gz");
    exported(
        py,
        py.detach(|| export::export_perfetto(&paths, &out, &opts)),
    )
}

/// One file's gzipped pprof profile at `out` (`leakscope export --pprof`): live bytes by
/// stack at `at`, or survivors per window with `growth`; returns what was written
/// (`leakscope.export.pprof/1`).
#[pyfunction]
fn export_pprof<'py>(
    py: Python<'py>,
    path: PathBuf,
    out: PathBuf,
    kw: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    let kw = kw.copy()?;
    let mut opts = export::PprofOptions::default();
    opts.at = at(&need::<String>(&kw, "at")?)?;
    opts.growth = need(&kw, "growth")?;
    let analysis = options(&kw)?;
    opts.export.analysis = analysis;
    exported(py, py.detach(|| export::export_pprof(&path, &out, &opts)))
}

/// An export's summary as JSON, or its error as the exception of its kind.
fn exported<'py, T: serde::Serialize>(
    py: Python<'py>,
    r: Result<T, export::ExportError>,
) -> PyResult<Bound<'py, PyAny>> {
    match r {
        Ok(written) => to_python(py, &written),
        Err(e) => Err(kind_error(e.kind(), e.to_string())),
    }
}

/// One path, or a list of them.
fn paths(p: &Bound<'_, PyAny>) -> PyResult<Vec<PathBuf>> {
    match p.extract::<PathBuf>() {
        Ok(one) => Ok(vec![one]),
        Err(_) => p.extract(),
    }
}

/// The CI gate (`leakscope check`): the budget (a TOML file, its text, or its tables as a
/// dict), a baseline (an earlier `check` or `leaks` JSON file, or its dict), a `[roles]`
/// file (used instead of the budget's own `[roles]`).
#[pyfunction]
#[pyo3(signature = (sessions, budget, baseline=None, windows=None, roles=None))]
fn check(
    py: Python<'_>,
    sessions: Vec<PyRef<'_, NativeSession>>,
    budget: &Bound<'_, PyAny>,
    baseline: Option<&Bound<'_, PyAny>>,
    windows: Option<&str>,
    roles: Option<PathBuf>,
) -> PyResult<Py<Checked>> {
    let budget = if budget.is_instance_of::<PyDict>() {
        Budget::deserialize_from(&mut pythonize::Depythonizer::from_object(budget))
    } else {
        // A string that cannot be a file name is the TOML itself.
        let text = match budget.extract::<String>() {
            Ok(t) if t.contains('\n') || t.contains('=') => t,
            _ => read_small_text(budget.extract()?)?,
        };
        Budget::parse(&text)
    }
    .map_err(|e| usage(format!("budget: {e}")))?;
    let baseline = baseline
        .map(|b| -> PyResult<String> {
            if b.is_instance_of::<PyDict>() {
                Ok(from_python::<serde_json::Value>(b, "baseline")?.to_string())
            } else {
                read_small_text(b.extract()?)
            }
        })
        .transpose()?
        .map(|t| Baseline::from_json(&t))
        .transpose()
        .map_err(|e| usage(format!("baseline: {e}")))?;
    let windows = windows.map(|w| parse(w, "windows")).transpose()?;
    let mut base = Options::default();
    if let Some(p) = roles {
        base.roles = roles_file(&p)?;
    }
    let opts = session::check_options(&budget, windows, &base);
    let all: Vec<Arc<Session>> = sessions.iter().map(|s| s.inner.clone()).collect();
    let report = py.detach(|| {
        all.iter()
            .map(|s| s.check(&budget, baseline.as_ref(), &opts))
            .collect::<Result<Vec<_>, _>>()
            .map(CheckReport::new)
            .map_err(session_error)
    })?;
    Checked::new_object(
        py,
        Report::of("check", &report)?,
        render::junit::junit(&report),
    )
}

/// Runs the command line (`argv` with the program name first); returns the exit code.
/// `own_signals` (the `leakscope` command, whose process this is) makes SIGINT and SIGTERM
/// remove the run's temporaries before the process ends; a library call leaves the
/// host's signals alone.
#[pyfunction]
#[pyo3(signature = (argv, own_signals=false))]
fn run_cli(py: Python<'_>, argv: Vec<String>, own_signals: bool) -> u8 {
    if own_signals {
        leakscope::files::remove_temporaries_on_signals();
    }
    py.detach(|| leakscope::cli::main(argv))
}

/// Writes `data` to `path` whole (a temporary renamed into place), refusing a path that
/// is one of `inputs` or the file `session` was loaded from.
#[pyfunction]
#[pyo3(signature = (path, data, inputs, session=None))]
fn write_output(
    py: Python<'_>,
    path: PathBuf,
    data: &[u8],
    inputs: Vec<PathBuf>,
    session: Option<&NativeSession>,
) -> PyResult<u64> {
    let mut files = leakscope::files::Inputs::of(&inputs);
    if let Some(src) = session.and_then(|s| s.source.as_ref()) {
        files.add(src);
    }
    py.detach(|| leakscope::files::write_whole(&files, &path, data))
        .map_err(|e| kind_error(e.kind(), e.to_string()))
}

/// A budget's or baseline's text, read with the library's size limit.
fn read_small_text(path: PathBuf) -> PyResult<String> {
    leakscope::files::read_small_text(&path).map_err(|e| match e {
        leakscope::files::SmallTextError::Io(io) => PyErr::from(io),
        other => usage(format!("cannot read {}: {other}", path.display())),
    })
}

/// The bytes ``size`` names, read as budgets read sizes: a non-negative ``int``, or a
/// string such as ``"1.5 MB"`` (powers of 1000), ``"512 KiB"`` or ``"1 M"`` (powers of
/// 1024), rounded to the nearest byte. A bad string or a negative number raises
/// ``leakscope.UsageError`` (a ``ValueError``); anything else ``TypeError``.
///
/// >>> parse_size("1 MiB"), parse_size("1.5 MB"), parse_size(4096)
/// (1048576, 1500000, 4096)
#[pyfunction]
fn parse_size(size: &Bound<'_, PyAny>) -> PyResult<u64> {
    if size.is_instance_of::<pyo3::types::PyBool>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "a size is an int or a string such as '1 MiB', not {size}"
        )));
    }
    if let Ok(n) = size.extract::<i128>() {
        return u64::try_from(n).map_err(|_| usage(format!("a size cannot be negative: {n}")));
    }
    let Ok(text) = size.extract::<String>() else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "a size is an int or a string such as '1 MiB', not {}",
            size.repr()?
        )));
    };
    leakscope::budget::parse_size(&text).map_err(|e| usage(format!("not a size: {e}")))
}

/// ``n`` bytes as every leakscope output writes them; with ``exact``, the exact count
/// follows where the unit rounds it.
///
/// >>> format_size(16777216), format_size(155582464, exact=True)
/// ('16.0 MiB', '148 MiB (155,582,464 B)')
#[pyfunction]
#[pyo3(signature = (n, exact=false))]
fn format_size(n: u64, exact: bool) -> String {
    if exact {
        render::bytes_exact(n)
    } else {
        render::bytes(n)
    }
}

/// The measures `assert_memory_below` can limit, each with what it measures.
#[pyfunction]
fn memory_measures() -> Vec<(&'static str, &'static str)> {
    MEMORY_MEASURES
        .iter()
        .map(|m| (m.name, m.meaning))
        .collect()
}

/// The default limit on decompressed size, in bytes.
#[pyfunction]
fn default_max_decompressed_bytes() -> u64 {
    leakscope::load::default_max_decompressed_bytes()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeSession>()?;
    m.add_class::<Dispatch>()?;
    m.add_class::<Report>()?;
    m.add_class::<Checked>()?;
    m.add_function(wrap_pyfunction!(export_shares, m)?)?;
    m.add_function(wrap_pyfunction!(load_path, m)?)?;
    m.add_function(wrap_pyfunction!(load_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(from_object, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(ranks, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(list_here, m)?)?;
    m.add_function(wrap_pyfunction!(analyse_found, m)?)?;
    m.add_function(wrap_pyfunction!(merge_found, m)?)?;
    m.add_function(wrap_pyfunction!(merge_listings, m)?)?;
    m.add_function(wrap_pyfunction!(load_series, m)?)?;
    m.add_function(wrap_pyfunction!(series_files, m)?)?;
    m.add_function(wrap_pyfunction!(export_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(export_perfetto, m)?)?;
    m.add_function(wrap_pyfunction!(export_pprof, m)?)?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(write_output, m)?)?;
    m.add_function(wrap_pyfunction!(default_max_decompressed_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(format_size, m)?)?;
    m.add_function(wrap_pyfunction!(memory_measures, m)?)?;
    m.add_function(wrap_pyfunction!(params, m)?)?;
    m.add_function(wrap_pyfunction!(about, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
