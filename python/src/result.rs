//! The objects Python's calls return (`leakscope.Result`, `leakscope.CheckResult`): the
//! report's document as `leakscope <command> --json` prints it, the text the command
//! prints without colour, and the views of both: a dict, the main table (`render::rows`),
//! a DataFrame and a notebook view of the text.

use leakscope::render::{self, Text};
use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{from_python, to_python, usage};

/// A report: what ``leakscope <command> --json`` prints, as an object. ``str()`` is what
/// the command prints (without colour), ``to_dict()`` its JSON, ``rows()`` and
/// ``to_pandas()`` its main table (one row per site, segment, rank, ...), and a notebook
/// shows the text.
///
/// Example::
///
///     r = leakscope.load("run.pickle").leaks()
///     r.to_dict()["schema"]      # 'leakscope.leaks/8'
///     r.to_pandas()              # one row per growing site
#[pyclass(subclass, frozen, module = "leakscope", name = "Result")]
pub struct Report {
    command: String,
    /// The document as JSON text: a third of what it takes as a `serde_json::Value`, and
    /// read straight into Python objects on each `to_dict()`.
    json: String,
    schema: String,
    text: String,
}

/// The fields of a report's document a result reads without its table.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    schema: String,
    #[serde(default)]
    passed: Option<bool>,
}

impl Report {
    /// `r` as the command `command` reports it.
    pub fn of<T: serde::Serialize + Text>(command: &str, r: &T) -> PyResult<Self> {
        let (json, text) = crate::both(r)?;
        Report::from_json(command, json, text)
    }

    /// A report whose JSON was written elsewhere (the tree's, the HTML report's data).
    pub fn from_json(command: &str, json: String, text: String) -> PyResult<Self> {
        let head: Head =
            serde_json::from_str(&json).map_err(|e| usage(format!("not a report: {e}")))?;
        Ok(Report {
            command: command.to_string(),
            json,
            schema: head.schema,
            text,
        })
    }

    pub fn passed(&self) -> bool {
        serde_json::from_str::<Head>(&self.json).is_ok_and(|h| h.passed == Some(true))
    }

    fn table(&self) -> PyResult<Vec<serde_json::Map<String, serde_json::Value>>> {
        let doc: serde_json::Value =
            serde_json::from_str(&self.json).map_err(|e| usage(format!("not a report: {e}")))?;
        render::rows::rows(&doc)
            .ok_or_else(|| usage("not a leakscope report: its schema names no table".into()))
    }
}

#[pymethods]
impl Report {
    /// ``command``: the command's name; ``data``: its JSON text or dict; ``text``: what
    /// it prints.
    #[new]
    #[pyo3(signature = (command, data, text=String::new()))]
    fn new(command: String, data: &Bound<'_, PyAny>, text: String) -> PyResult<Self> {
        let json = match data.extract::<String>() {
            Ok(json) => json,
            Err(_) => from_python::<serde_json::Value>(data, "data")?.to_string(),
        };
        Report::from_json(&command, json, text)
    }

    /// What ``leakscope <command>`` prints for the same arguments (without colour).
    fn __str__(&self) -> &str {
        &self.text
    }

    /// The command that made it (``leaks``, ``top``, ``compare_at``, ...).
    #[getter]
    fn command(&self) -> &str {
        &self.command
    }

    /// The JSON schema name and version, for example ``leakscope.leaks/8``.
    #[getter]
    fn schema(&self) -> &str {
        &self.schema
    }

    /// The report as the command line's ``--json`` prints it (a fresh dict each call).
    ///
    /// Example: ``snap.top(at="peak").to_dict()["devices"][0]["rows"][0]["site"]["label"]``
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut json = serde_json::Deserializer::from_str(&self.json);
        serde_transcode::transcode(&mut json, pythonize::Pythonizer::new(py))
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))
    }

    /// The report as JSON text (``json.dumps`` of ``to_dict()``).
    #[pyo3(signature = (indent=Some(2)))]
    fn to_json(&self, py: Python<'_>, indent: Option<usize>) -> PyResult<String> {
        let kw = PyDict::new(py);
        kw.set_item("indent", indent)?;
        py.import("json")?
            .getattr("dumps")?
            .call((self.to_dict(py)?,), Some(&kw))?
            .extract()
    }

    /// The main table as a list of dicts (one per site, segment, rank, ...).
    fn rows<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.table()?)
    }

    /// The main table as a ``pandas.DataFrame`` (``pip install pandas``).
    ///
    /// Example: ``snap.leaks().to_pandas().sort_values("bytes_per_window")``
    fn to_pandas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let pandas = py.import("pandas").map_err(|_| {
            PyImportError::new_err(
                "to_pandas() needs pandas: pip install pandas (or leakscope[pandas])",
            )
        })?;
        pandas.getattr("DataFrame")?.call1((self.rows(py)?,))
    }

    /// The command's own text, so a notebook shows all it says (an OOM's request, driver
    /// free, fragmentation and advice).
    fn _repr_html_(&self) -> String {
        // Line by line: the escape shows a control character, a line end included, as text.
        let lines: Vec<String> = self.text.split('\n').map(render::html::escape).collect();
        format!(
            "<div><strong>leakscope {}</strong><pre style=\"white-space: pre; overflow-x: auto\">{}</pre></div>",
            render::html::escape(&self.command),
            lines.join("\n")
        )
    }

    /// Pickles as the command, the JSON and the text (a result crosses processes whole).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (String, String, String))> {
        let me = slf.get();
        let args = (me.command.clone(), me.json.clone(), me.text.clone());
        Ok((slf.get_type().into_any(), args))
    }

    fn __repr__(&self) -> PyResult<String> {
        let rows = self.table().map_or(0, |t| t.len());
        Ok(format!(
            "<leakscope {} result: {}, {rows} rows>",
            self.command,
            self.schema()
        ))
    }
}

/// The CI gate's result (``leakscope check --json``): ``passed``, every case as a row,
/// and the JUnit XML (``junit``).
///
/// Example::
///
///     r = leakscope.check(["run.pickle"], budget="leakscope.toml")
///     assert r.passed, r.failures()
#[pyclass(extends = Report, frozen, module = "leakscope", name = "CheckResult")]
pub struct Checked {
    junit: String,
}

impl Checked {
    /// The result object of a `check` report and its JUnit XML.
    pub fn new_object(py: Python<'_>, report: Report, junit: String) -> PyResult<Py<Checked>> {
        Py::new(
            py,
            PyClassInitializer::from(report).add_subclass(Checked { junit }),
        )
    }
}

#[pymethods]
impl Checked {
    /// ``data``: the ``check`` report's JSON text or dict; ``text``: what it prints;
    /// ``junit``: its JUnit XML.
    #[new]
    fn new(
        data: &Bound<'_, PyAny>,
        text: String,
        junit: String,
    ) -> PyResult<PyClassInitializer<Self>> {
        let report = Report::new("check".into(), data, text)?;
        Ok(PyClassInitializer::from(report).add_subclass(Checked { junit }))
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (String, String, String))> {
        let base = slf.as_super().get();
        let args = (
            base.json.clone(),
            base.text.clone(),
            slf.get().junit.clone(),
        );
        Ok((slf.get_type().into_any(), args))
    }

    /// The JUnit XML, a test case per limit of each file and device.
    #[getter]
    fn junit(&self) -> &str {
        &self.junit
    }

    /// Whether every limit of every file and device held.
    #[getter]
    fn passed(slf: PyRef<'_, Self>) -> bool {
        slf.as_super().passed()
    }

    /// The cases that failed.
    fn failures<'py>(slf: PyRef<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let failed: Vec<_> = slf
            .as_super()
            .table()?
            .into_iter()
            .filter(|r| r.get("passed") == Some(&serde_json::Value::Bool(false)))
            .collect();
        to_python(py, &failed)
    }

    fn __bool__(slf: PyRef<'_, Self>) -> bool {
        slf.as_super().passed()
    }
}
