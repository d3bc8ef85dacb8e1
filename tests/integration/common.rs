//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use leakscope::analysis::summary;
use leakscope::{LoadOptions, Snapshot};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A path under `fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    root().join("fixtures").join(rel)
}

/// Loads bytes; `Err("PANIC")` if the loader panicked, else its message on failure.
pub fn try_load(bytes: &[u8]) -> Result<Snapshot, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        leakscope::load_bytes(bytes, LoadOptions::default())
    })) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("PANIC".into()),
    }
}

/// The loader's error message for bytes that must not load (and must not panic).
pub fn err_of(bytes: &[u8]) -> String {
    match try_load(bytes) {
        Ok(_) => panic!("expected an error"),
        Err(e) => {
            assert_ne!(e, "PANIC");
            e
        }
    }
}

/// Loads a file, panicking with the loader's message on failure.
pub fn load(path: &Path) -> Snapshot {
    leakscope::load_path(path, LoadOptions::default())
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

/// The summary as JSON, the way `leakscope summary --json` prints it.
pub fn summary_json(snap: &Snapshot, name: &str) -> serde_json::Value {
    serde_json::to_value(summary::summarize(snap, name)).expect("summary serializes")
}

/// Reads a JSON file.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Fields compared between leakscope's summary and the CPython reference, per device
/// and in total.
const SUM_FIELDS: &[&str] = &[
    "segments",
    "blocks",
    "active_blocks",
    "reserved_bytes",
    "allocated_bytes",
    "requested_bytes",
    "active_bytes",
    "trace_events",
    "actions",
    "blocks_by_state",
];

const DEVICE_FIELDS: &[&str] = &[
    "device",
    "first_time_us",
    "last_time_us",
    "unmatched_frees",
    "pre_trace_blocks",
    "unmatched_segment_frees",
];

/// Compares a leakscope summary with an entry of `tests/expected/*_summary.json`
/// (written by `tests/expected/cpython_summary.py` with CPython's `pickle`). Returns the
/// list of differences.
pub fn diff_against_cpython(ours: &serde_json::Value, expected: &serde_json::Value) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut cmp = |what: String, a: &serde_json::Value, b: &serde_json::Value| {
        if a != b {
            diffs.push(format!("{what}: leakscope {a} != cpython {b}"));
        }
    };
    for f in SUM_FIELDS {
        cmp(
            format!("totals.{f}"),
            &ours["totals"][f],
            &expected["totals"][f],
        );
    }
    let od = ours["devices"].as_array().cloned().unwrap_or_default();
    let ed = expected["devices"].as_array().cloned().unwrap_or_default();
    cmp(
        "device count".into(),
        &serde_json::json!(od.len()),
        &serde_json::json!(ed.len()),
    );
    for (o, e) in od.iter().zip(&ed) {
        for f in SUM_FIELDS.iter().chain(DEVICE_FIELDS) {
            cmp(format!("devices[{}].{f}", e["device"]), &o[f], &e[f]);
        }
    }
    cmp(
        "frames.unique_frames".into(),
        &ours["frames"]["unique_frames"],
        &expected["unique_frames"],
    );
    cmp(
        "frames.unique_stacks".into(),
        &ours["frames"]["unique_stacks"],
        &expected["unique_stacks"],
    );
    cmp(
        "annotations".into(),
        &ours["annotations"],
        &expected["annotations"],
    );
    cmp(
        "trace.wrapped".into(),
        &ours["trace"]["wrapped"],
        &expected["wrapped"],
    );
    cmp(
        "format.pickle_protocol".into(),
        &ours["format"]["pickle_protocol"],
        &expected["pickle_protocol"],
    );
    cmp(
        "format.layout".into(),
        &ours["format"]["layout"],
        &match expected["layout"].as_str() {
            Some("list") => serde_json::json!("segment-list"),
            _ => serde_json::json!("dict"),
        },
    );
    let top: serde_json::Value = expected["top_keys"].clone();
    cmp("top_keys".into(), &ours["top_keys"], &top);
    diffs
}

/// The summary without the fields that describe the encoding, for comparing encodings.
pub fn content_only(mut s: serde_json::Value) -> serde_json::Value {
    if let Some(o) = s.as_object_mut() {
        o.remove("format");
        o.remove("file");
        o.remove("warnings");
    }
    s
}

/// `LEAKSCOPE_CORPUS` (the real snapshots), or `None` with a note that the test is skipped.
pub fn corpus(test: &str) -> Option<PathBuf> {
    match std::env::var_os("LEAKSCOPE_CORPUS") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            assert!(
                p.is_dir(),
                "LEAKSCOPE_CORPUS={} is not a directory",
                p.display()
            );
            Some(p)
        }
        _ => {
            eprintln!("{test}: skipped (set LEAKSCOPE_CORPUS to ../shared/fixtures/real)");
            None
        }
    }
}

/// Whether `python3` runs here.
pub fn have_python() -> bool {
    std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Runs the binary with `args` (plus `--json`), asserts success, parses stdout.
pub fn leakscope_json(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args(args)
        .arg("--json")
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// The real corpus's snapshots (`cuda/` and `torch_npu/` below `corpus`), by path.
pub fn corpus_snapshots(corpus: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["cuda", "torch_npu"]
        .iter()
        .flat_map(|sub| std::fs::read_dir(corpus.join(sub)).expect("a corpus folder"))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    files
}

/// Every scenario with its ground truth: `(name, truth)` for each
/// `fixtures/scenarios/NAME.truth.json`, sorted by name.
pub fn scenario_truths() -> Vec<(String, serde_json::Value)> {
    let mut out: Vec<(String, serde_json::Value)> = std::fs::read_dir(fixture("scenarios"))
        .expect("fixtures/scenarios")
        .filter_map(|e| {
            let path = e.ok()?.path();
            let stem = path
                .file_name()?
                .to_str()?
                .strip_suffix(".truth.json")?
                .to_string();
            Some((stem, read_json(&path)))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A session over a file, panicking with the loader's message on failure.
pub fn session(path: &Path) -> leakscope::Session {
    leakscope::Session::open(path, LoadOptions::default())
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

/// Options for one device, grouped by `by`, frames filtered by `filters`.
pub fn device_options(
    device: i64,
    by: leakscope::attribute::GroupBy,
    filters: leakscope::attribute::FrameFilters,
) -> leakscope::Options {
    let mut o = leakscope::Options::default();
    o.devices = leakscope::session::DeviceSelection::Only(device);
    o.by = by;
    o.filters = filters;
    o
}

/// Options with windows from `spec` (every device).
pub fn window_options(spec: &str) -> leakscope::Options {
    let mut o = leakscope::Options::default();
    o.windows = spec.parse().expect("a valid --windows spec");
    o
}

/// A scenario's truth per device: the `devices` list of a multi-device file, else the
/// file's own truth for its one device.
pub fn device_truths(truth: &serde_json::Value) -> Vec<(i64, serde_json::Value)> {
    match truth["devices"].as_array() {
        Some(ds) => ds
            .iter()
            .map(|d| (d["device"].as_i64().unwrap(), d.clone()))
            .collect(),
        None => vec![(truth["device"].as_i64().unwrap_or(0), truth.clone())],
    }
}

/// Load options with the helper threads off (as `ranks` loads each of its files).
pub fn one_thread() -> LoadOptions<'static> {
    let mut o = LoadOptions::default();
    o.threads = false;
    o
}

/// Runs the binary with `args` (`NO_COLOR` set): exit code, stdout, stderr.
pub fn run_cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `json.dumps(pickle.load(path))` as CPython computes it.
pub fn cpython_json(path: &Path) -> serde_json::Value {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import json,pickle,sys; json.dump(pickle.load(open(sys.argv[1],'rb')), sys.stdout)",
        ])
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{}: python failed", path.display());
    serde_json::from_slice(&out.stdout).expect("python wrote JSON")
}

/// The per-device summary numbers a scenario's truth states (`summary` of each device):
/// the first six of [`SUM_FIELDS`], and the actions.
pub const TRUTH_DEVICE_FIELDS: &[&str] = &[
    SUM_FIELDS[0],
    SUM_FIELDS[1],
    SUM_FIELDS[2],
    SUM_FIELDS[3],
    SUM_FIELDS[4],
    SUM_FIELDS[5],
    "trace_events",
    "actions",
];

/// The entry of device `device` in a report's `devices` array.
pub fn device_of<'v>(
    report: &'v serde_json::Value,
    device: i64,
    what: &str,
) -> &'v serde_json::Value {
    report["devices"]
        .as_array()
        .expect("a devices array")
        .iter()
        .find(|d| d["device"] == device)
        .unwrap_or_else(|| panic!("{what}: no device {device}"))
}

/// Hand-written snapshots: events, blocks and segments as JSON (which leakscope reads like
/// the pickle), each number chosen so a test can work out its result by hand.
pub mod hand {
    use serde_json::{Value, json};

    pub const S: u64 = 0x7f00_0000_0000; // a segment's base address
    pub const MIB: u64 = 1 << 20;

    fn frames() -> Value {
        json!([{"name": "step", "filename": "/work/train.py", "line": 12}])
    }

    pub fn event(action: &str, addr: u64, size: u64) -> Value {
        json!({"action": action, "addr": addr, "size": size, "stream": 0, "frames": frames()})
    }

    pub fn block(address: u64, size: u64, requested: u64, state: &str) -> Value {
        json!({"address": address, "size": size, "requested_size": requested, "state": state,
               "frames": frames()})
    }

    pub fn segment(address: u64, total: u64, blocks: Vec<Value>) -> Value {
        json!({"device": 0, "address": address, "total_size": total, "stream": 0,
               "segment_type": if total <= 2 * MIB { "small" } else { "large" },
               "is_expandable": false, "blocks": blocks})
    }

    /// Writes a snapshot (as JSON, which leakscope reads like the pickle) to a temporary file.
    pub fn written(segments: Vec<Value>, trace: Vec<Value>) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hand.json");
        let doc = json!({"segments": segments, "device_traces": [trace]});
        std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
        let p = path.to_str().unwrap().to_string();
        (dir, p)
    }

    /// [`event`] with the stack `file:line:function` of its own.
    pub fn event_at(action: &str, addr: u64, size: u64, line: u32) -> Value {
        let mut e = event(action, addr, size);
        e["frames"] = json!([{"name": "step", "filename": "/work/train.py", "line": line}]);
        e
    }
}

/// A truth file's map of labels to `{"bytes", "blocks"}` (`by_site`, a names' grouping),
/// as `(bytes, blocks)` by label.
pub fn truth_groups(v: &serde_json::Value) -> std::collections::BTreeMap<String, (u64, u64)> {
    v.as_object()
        .expect("a map of labels")
        .iter()
        .map(|(k, g)| {
            (
                k.clone(),
                (g["bytes"].as_u64().unwrap(), g["blocks"].as_u64().unwrap()),
            )
        })
        .collect()
}

/// A big-enough snapshot for timing-dependent cases: CPython writes `n` trace events.
pub fn big_snapshot(path: &Path, n: usize) {
    let script = r#"
import pickle, sys
n = int(sys.argv[2])
frames = [{'name': 'f%d' % i, 'filename': 'model.py', 'line': i} for i in range(8)]
tr = []
for i in range(n):
    a = 0x7f0000000000 + (i % 4096) * 1024
    tr.append({'action': 'alloc' if i % 2 == 0 else 'free_completed', 'addr': a,
               'size': 1024, 'stream': 0, 'time_us': i, 'frames': frames[i % 8:]})
pickle.dump({'segments': [], 'device_traces': [tr]}, open(sys.argv[1], 'wb'), protocol=4)
"#;
    let st = std::process::Command::new("python3")
        .args(["-c", script, path.to_str().unwrap(), &n.to_string()])
        .status()
        .expect("python3 runs");
    assert!(st.success());
}
