//! `leakscope export --parquet`: the tables read back with the parquet crate's Arrow
//! reader and checked against numbers computed elsewhere (CPython's `pickle`, the
//! scenarios' ground truth, the other commands' JSON).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use leakscope::analysis::At;
use leakscope::export::{ExportError, ExportOptions, export_parquet};
use leakscope::session::{Options, Session};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;

use crate::common::*;

const TABLES: [&str; 7] = [
    "files",
    "ranks",
    "suspects",
    "top_sites",
    "events",
    "stacks",
    "series",
];

/// The scenario files exported beside the verl run directory.
const SCENARIOS: [&str; 4] = [
    "pp_last_stage_recv_pinned",
    "fragmentation_oom",
    "two_devices_recv_leak",
    "npu_shaped",
];

/// A table read back: its batches and the file's key-value metadata.
struct Read {
    batches: Vec<RecordBatch>,
    meta: HashMap<String, String>,
}

impl Read {
    fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    fn columns(&self, name: &str) -> impl Iterator<Item = &dyn Array> {
        self.batches.iter().map(move |b| {
            b.column_by_name(name)
                .unwrap_or_else(|| panic!("no column {name}"))
                .as_ref()
        })
    }

    fn str(&self, name: &str) -> Vec<Option<String>> {
        self.columns(name)
            .flat_map(|c| {
                c.as_string::<i32>()
                    .iter()
                    .map(|v| v.map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn u64(&self, name: &str) -> Vec<Option<u64>> {
        self.columns(name)
            .flat_map(|c| c.as_primitive::<UInt64Type>().iter().collect::<Vec<_>>())
            .collect()
    }

    fn u32(&self, name: &str) -> Vec<Option<u32>> {
        self.columns(name)
            .flat_map(|c| c.as_primitive::<UInt32Type>().iter().collect::<Vec<_>>())
            .collect()
    }

    fn i64(&self, name: &str) -> Vec<Option<i64>> {
        self.columns(name)
            .flat_map(|c| c.as_primitive::<Int64Type>().iter().collect::<Vec<_>>())
            .collect()
    }

    fn i32(&self, name: &str) -> Vec<Option<i32>> {
        self.columns(name)
            .flat_map(|c| c.as_primitive::<Int32Type>().iter().collect::<Vec<_>>())
            .collect()
    }

    /// Rows as JSON objects (every column), for comparing with the commands' JSON.
    fn row(&self, i: usize) -> serde_json::Map<String, serde_json::Value> {
        let mut at = i;
        for b in &self.batches {
            if at < b.num_rows() {
                let mut o = serde_json::Map::new();
                for (f, c) in b.schema().fields().iter().zip(b.columns()) {
                    let v = if c.is_null(at) {
                        serde_json::Value::Null
                    } else {
                        use arrow_schema::DataType as T;
                        match f.data_type() {
                            T::Utf8 => c.as_string::<i32>().value(at).into(),
                            T::UInt64 => c.as_primitive::<UInt64Type>().value(at).into(),
                            T::UInt32 => c.as_primitive::<UInt32Type>().value(at).into(),
                            T::Int64 => c.as_primitive::<Int64Type>().value(at).into(),
                            T::Int32 => c.as_primitive::<Int32Type>().value(at).into(),
                            T::Boolean => c.as_boolean().value(at).into(),
                            other => panic!("{}: unexpected type {other}", f.name()),
                        }
                    };
                    o.insert(f.name().clone(), v);
                }
                return o;
            }
            at -= b.num_rows();
        }
        panic!("row {i} out of range")
    }
}

/// Reads `dir/<table>.parquet`, checking what every table file must be: zstd column
/// chunks, row groups of at most 2^20 rows, the schema name in the metadata.
fn read(dir: &Path, table: &str) -> Read {
    let path = dir.join(format!("{table}.parquet"));
    let f = File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let b = ParquetRecordBatchReaderBuilder::try_new(f).expect("a Parquet file");
    let md = b.metadata().clone();
    let meta: HashMap<String, String> = md
        .file_metadata()
        .key_value_metadata()
        .into_iter()
        .flatten()
        .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        meta.get("leakscope_schema").map(String::as_str),
        Some(format!("leakscope.parquet.{table}/1").as_str()),
        "{table}: schema key"
    );
    assert!(
        !meta.contains_key("ARROW:schema"),
        "{table}: plain columns for every reader"
    );
    for rg in md.row_groups() {
        assert!(rg.num_rows() as usize <= 1 << 20, "{table}: row group size");
        for c in rg.columns() {
            assert!(
                matches!(c.compression(), Compression::ZSTD(_)),
                "{table}: {} is {:?}",
                c.column_path(),
                c.compression()
            );
        }
    }
    let batches = b
        .build()
        .expect("a reader")
        .collect::<Result<Vec<_>, _>>()
        .expect("batches");
    Read { batches, meta }
}

fn scenario(stem: &str) -> PathBuf {
    fixture(&format!("scenarios/{stem}.pickle"))
}

/// The verl run directory and the scenario files, exported once by the command.
fn export_all(out: &Path) -> serde_json::Value {
    let verl = fixture("scenarios/verl_ranks");
    let mut args = vec![
        "export".to_string(),
        verl.display().to_string(),
        "--parquet".into(),
        out.display().to_string(),
    ];
    args.extend(SCENARIOS.iter().map(|s| scenario(s).display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    leakscope_json(&args)
}

/// Every snapshot file of the export: the verl run's, then the scenarios'.
fn exported_files() -> Vec<PathBuf> {
    let (found, _) = leakscope::session::discover(&fixture("scenarios/verl_ranks")).unwrap();
    found
        .into_iter()
        .map(|f| f.file)
        .filter(|f| f.extension().is_some_and(|e| e == "pickle"))
        .chain(SCENARIOS.iter().map(|s| scenario(s)))
        .collect()
}

/// Per file, as CPython's `pickle` reads it: the trace events of every device, the sizes
/// of the `alloc` events summed, and the innermost frame of every event that has frames
/// (`[device, index, name, filename, line]`, a line beyond int64 as null).
fn cpython_events(files: &[PathBuf]) -> serde_json::Value {
    const SCRIPT: &str = r#"
import json, pickle, sys
out = {}
for path in sys.argv[1:]:
    snap = pickle.load(open(path, "rb"))
    traces = snap.get("device_traces", []) if isinstance(snap, dict) else []
    n, alloc, first = 0, 0, []
    for d, trace in enumerate(traces):
        for i, e in enumerate(trace):
            n += 1
            if e.get("action") == "alloc":
                alloc += e.get("size", 0)
            fr = e.get("frames") or []
            if fr:
                f = fr[0]
                line = f.get("line")
                if line is not None and line >= 2**63:
                    line = None
                first.append([d, i, f.get("name"), f.get("filename"), line])
    out[path] = {"events": n, "alloc_bytes": alloc, "first": first}
json.dump(out, sys.stdout)
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .args(files)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("python wrote JSON")
}

/// The whole export: what the command says it wrote, every table's metadata, and the
/// contents against CPython, the truth files and the other commands.
#[test]
fn export_of_a_run_and_scenarios_matches_independent_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tables");
    let written = export_all(&out);
    assert_eq!(written["schema"], "leakscope.export/1");
    let files = exported_files();
    assert_eq!(written["files_read"], files.len() as u64);
    assert_eq!(written["failed"], serde_json::json!([]));
    assert_eq!(written["skipped_files"], 1, "the run's truth.json");
    let t: BTreeMap<&str, Read> = TABLES.iter().map(|n| (*n, read(&out, n))).collect();
    for (i, name) in TABLES.iter().enumerate() {
        let w = &written["tables"][i];
        assert_eq!(w["table"], *name);
        assert_eq!(w["rows"], t[name].rows() as u64, "{name}: rows as reported");
        assert_eq!(
            w["schema"].as_str(),
            t[name].meta.get("leakscope_schema").map(String::as_str)
        );
    }

    check_events(&t["events"], &t["stacks"], &files);
    check_files(&t["files"], &files);
    check_ranks(&t["ranks"]);
    check_suspects(&t["suspects"]);
    check_top_sites(&t["top_sites"]);
}

/// Events: per file the count and the alloc bytes CPython computes; every event's
/// innermost frame, through `stacks`, is the one CPython reads; every stack an event
/// names has a depth-0 row.
fn check_events(events: &Read, stacks: &Read, files: &[PathBuf]) {
    let (file, action, size, stack_id) = (
        events.str("file"),
        events.str("action"),
        events.u64("size"),
        events.u32("stack_id"),
    );
    let (device, idx) = (events.i64("device"), events.u32("idx"));
    let mut per_file: HashMap<&str, (u64, u64)> = HashMap::new();
    for i in 0..events.rows() {
        let e = per_file.entry(file[i].as_deref().unwrap()).or_default();
        e.0 += 1;
        if action[i].as_deref() == Some("alloc") {
            e.1 += size[i].unwrap();
        }
    }
    // Depth-0 frames by (file, stack).
    let (sf, sid, depth) = (
        stacks.str("file"),
        stacks.u32("stack_id"),
        stacks.u32("depth"),
    );
    let (name, filename, line) = (
        stacks.str("name"),
        stacks.str("filename"),
        stacks.i64("line"),
    );
    let mut innermost: HashMap<(&str, u32), (String, String, Option<i64>)> = HashMap::new();
    let mut stack_depths: HashMap<(&str, u32), Vec<u32>> = HashMap::new();
    for i in 0..stacks.rows() {
        let key = (sf[i].as_deref().unwrap(), sid[i].unwrap());
        stack_depths.entry(key).or_default().push(depth[i].unwrap());
        if depth[i] == Some(0) {
            innermost.insert(
                key,
                (
                    name[i].clone().unwrap(),
                    filename[i].clone().unwrap(),
                    line[i],
                ),
            );
        }
    }
    for (k, d) in &stack_depths {
        let expect: Vec<u32> = (0..d.len() as u32).collect();
        assert_eq!(d, &expect, "{k:?}: depths 0, 1, 2, ... in order");
    }
    let mut used = 0;
    for i in 0..events.rows() {
        let s = stack_id[i].unwrap();
        if s != 0 {
            let key = (file[i].as_deref().unwrap(), s);
            assert!(innermost.contains_key(&key), "{key:?}: no depth-0 row");
            used += 1;
        }
    }
    assert!(used > 1000, "events with stacks: {used}");

    if !have_python() {
        eprintln!("check_events: CPython comparison skipped (no python3)");
        return;
    }
    let py = cpython_events(files);
    let mut events_of: HashMap<(&str, i64, u32), usize> = HashMap::new();
    for i in 0..events.rows() {
        events_of.insert(
            (
                file[i].as_deref().unwrap(),
                device[i].unwrap(),
                idx[i].unwrap(),
            ),
            i,
        );
    }
    for f in files {
        let name_of = f.display().to_string();
        let p = &py[&name_of];
        let (n, alloc) = per_file.get(name_of.as_str()).copied().unwrap_or_default();
        assert_eq!(n, p["events"].as_u64().unwrap(), "{name_of}: events");
        assert_eq!(
            alloc,
            p["alloc_bytes"].as_u64().unwrap(),
            "{name_of}: Σ alloc sizes"
        );
        for fr in p["first"].as_array().unwrap() {
            let (d, i) = (fr[0].as_i64().unwrap(), fr[1].as_u64().unwrap() as u32);
            let row = events_of[&(name_of.as_str(), d, i)];
            let s = stack_id[row].unwrap();
            assert_ne!(s, 0, "{name_of}: event {d}/{i} has frames");
            let (n, f, l) = &innermost[&(name_of.as_str(), s)];
            assert_eq!(
                (n.as_str(), f.as_str(), *l),
                (
                    fr[2].as_str().unwrap(),
                    fr[3].as_str().unwrap(),
                    fr[4].as_i64()
                ),
                "{name_of}: event {d}/{i}'s innermost frame"
            );
        }
        // Events without frames have stack 0 (counted both ways).
        let with_frames = (0..events.rows())
            .filter(|&i| file[i].as_deref() == Some(name_of.as_str()) && stack_id[i] != Some(0))
            .count();
        assert_eq!(
            with_frames,
            p["first"].as_array().unwrap().len(),
            "{name_of}"
        );
    }
}

/// Files: one row per file and device with `summary`'s numbers; run files carry their
/// rank and step, files given by name nulls.
fn check_files(t: &Read, files: &[PathBuf]) {
    let mut rows: HashMap<(String, Option<i64>), usize> = HashMap::new();
    for i in 0..t.rows() {
        let r = t.row(i);
        rows.insert(
            (
                r["file"].as_str().unwrap().to_string(),
                r["device"].as_i64(),
            ),
            i,
        );
    }
    let mut n = 0;
    for f in files {
        let name = f.display().to_string();
        let s = leakscope_json(&["summary", &name]);
        let run = name.contains("verl_ranks");
        for d in s["devices"].as_array().unwrap() {
            n += 1;
            let r = t.row(rows[&(name.clone(), d["device"].as_i64())]);
            for k in [
                "reserved_bytes",
                "allocated_bytes",
                "requested_bytes",
                "trace_events",
            ] {
                assert_eq!(r[k], d[k], "{name}: device {}: {k}", d["device"]);
            }
            assert_eq!(r["producer"], s["format"]["producer"]);
            assert_eq!(r["format"], s["format"]["container"]);
            assert_eq!(r["compression"], s["format"]["compression"]);
            assert_eq!(r["pickle_protocol"], s["format"]["pickle_protocol"]);
            assert_eq!(r["file_bytes"], std::fs::metadata(f).unwrap().len());
            assert_eq!(r["rank"].is_null(), !run, "{name}: rank");
            assert_eq!(r["step"].is_null(), !run, "{name}: step");
            if run {
                let step = f.parent().unwrap().file_name().unwrap().to_str().unwrap();
                assert_eq!(r["step"], step.trim_start_matches("step"));
            }
        }
    }
    assert_eq!(t.rows(), n, "one row per file and device");
}

/// Ranks: the run directory's rows are `ranks --json`'s, value for value; the files given
/// by name are rows of their own with null rank and step.
fn check_ranks(t: &Read) {
    let verl = fixture("scenarios/verl_ranks");
    let v = leakscope_json(&["ranks", verl.to_str().unwrap()]);
    let expected = v["ranks"].as_array().unwrap();
    let ours: Vec<_> = (0..t.rows())
        .map(|i| t.row(i))
        .filter(|r| r["file"].as_str().unwrap().contains("verl_ranks"))
        .collect();
    assert_eq!(ours.len(), expected.len());
    for (o, e) in ours.iter().zip(expected) {
        for (k, ev) in e.as_object().unwrap() {
            let want = if k == "top_suspect" {
                ev["label"].clone()
            } else {
                ev.clone()
            };
            assert_eq!(o[k], want, "{}: {k}", e["file"]);
        }
        assert_eq!(
            o.len(),
            e.as_object().unwrap().len(),
            "same columns as the JSON rows"
        );
    }
    assert!(ours.iter().any(|r| r["outlier"] == true), "rank 3 flagged");
    let named: Vec<_> = (0..t.rows())
        .map(|i| t.row(i))
        .filter(|r| !r["file"].as_str().unwrap().contains("verl_ranks"))
        .collect();
    assert!(named.len() >= SCENARIOS.len());
    for r in &named {
        assert!(r["rank"].is_null() && r["step"].is_null(), "{r:?}");
        assert!(r["error"].is_null(), "{r:?}");
    }
}

/// Suspects: the pipeline scenario's are the truth's leaks, kind and rate, with
/// `create_tensor_recv_prev` among them at the truth's 16 MiB per window; every suspect
/// row is the `leaks` command's.
fn check_suspects(t: &Read) {
    let stem = "pp_last_stage_recv_pinned";
    let name = scenario(stem).display().to_string();
    let truth = read_json(&fixture(&format!("scenarios/{stem}.truth.json")));
    let rows: Vec<_> = (0..t.rows())
        .map(|i| t.row(i))
        .filter(|r| r["file"] == name.as_str())
        .collect();
    let truth_leaks = truth["leaks"].as_array().unwrap();
    assert!(!truth_leaks.is_empty());
    for l in truth_leaks {
        let r = rows
            .iter()
            .find(|r| r["label"] == l["site"])
            .unwrap_or_else(|| panic!("{}: not a suspect row", l["site"]));
        assert_eq!(r["kind"], l["kind"], "{}", l["site"]);
        assert_eq!(
            r["bytes_per_window"], l["bytes_per_window"],
            "{}",
            l["site"]
        );
        assert_eq!(r["at_end"], l["bytes_live_at_end"], "{}", l["site"]);
    }
    let recv = rows
        .iter()
        .find(|r| r["name"] == "create_tensor_recv_prev")
        .expect("create_tensor_recv_prev is a suspect");
    let truth_recv = truth_leaks
        .iter()
        .find(|l| {
            l["site"]
                .as_str()
                .unwrap()
                .ends_with(":create_tensor_recv_prev")
        })
        .unwrap();
    assert_eq!(recv["bytes_per_window"], truth_recv["bytes_per_window"]);
    assert_eq!(recv["bytes_per_window"], 16_777_216);

    // Every file's rows are what `leaks` lists as suspects, in its order.
    let s = Session::open(scenario(stem), Default::default()).unwrap();
    let leaks = s.leaks(&Options::default()).unwrap();
    let mine: Vec<_> = leaks.devices.iter().flat_map(|d| &d.suspects).collect();
    assert_eq!(mine.len(), rows.len());
    for (g, r) in mine.iter().zip(&rows) {
        assert_eq!(r["label"], g.site.label.as_str());
        assert_eq!(r["line"].as_i64(), g.site.line);
        assert_eq!(r["held_at_most"], g.retained_bytes);
        assert_eq!(r["windows_grown"], g.windows_growing);
        assert_eq!(r["onset_window"], g.onset_window);
    }
}

/// Top sites: at each point, every site `top` lists (no limit), the peak's bytes summing
/// to the truth's live bytes at the peak; `oom` rows only for the OOM scenario.
fn check_top_sites(t: &Read) {
    let rows: Vec<_> = (0..t.rows()).map(|i| t.row(i)).collect();
    for stem in SCENARIOS {
        let name = scenario(stem).display().to_string();
        let s = Session::open(scenario(stem), Default::default()).unwrap();
        for (at, point) in [(At::End, "end"), (At::Peak, "peak"), (At::Oom, "oom")] {
            let mine: Vec<_> = rows
                .iter()
                .filter(|r| r["file"] == name.as_str() && r["point"] == point)
                .collect();
            let Ok(top) = s.top(&Options::default(), at, usize::MAX) else {
                assert!(mine.is_empty(), "{stem}: {point} rows without the point");
                continue;
            };
            let theirs: Vec<_> = top
                .devices
                .iter()
                .flat_map(|d| d.rows.iter().map(move |r| (d.device, r)))
                .collect();
            assert_eq!(mine.len(), theirs.len(), "{stem} {point}");
            for (m, (d, r)) in mine.iter().zip(&theirs) {
                assert_eq!(m["device"], *d);
                assert_eq!(m["label"], r.site.label.as_str());
                assert_eq!(m["bytes"], r.bytes);
                assert_eq!(m["blocks"], r.blocks);
            }
        }
    }
    let stem = "pp_last_stage_recv_pinned";
    let name = scenario(stem).display().to_string();
    let truth = read_json(&fixture(&format!("scenarios/{stem}.truth.json")));
    let peak: u64 = rows
        .iter()
        .filter(|r| r["file"] == name.as_str() && r["point"] == "peak")
        .map(|r| r["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        peak,
        truth["peak"]["live_requested_bytes"].as_u64().unwrap()
    );
    let oom_files: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r["point"] == "oom")
        .map(|r| r["file"].as_str().unwrap())
        .collect();
    assert_eq!(
        oom_files.into_iter().collect::<Vec<_>>(),
        [scenario("fragmentation_oom").display().to_string()]
    );
}

/// A file that cannot be read is a ranks row with its error and nothing else; the others
/// are exported; the command succeeds.
#[test]
fn unreadable_file_is_a_row_and_the_rest_is_exported() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("truncated.pickle");
    let good = scenario("pp_last_stage_recv_pinned");
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() / 2]).unwrap();
    let out = tmp.path().join("out");
    let (code, stdout, stderr) = run_cli(&[
        "export",
        bad.to_str().unwrap(),
        good.to_str().unwrap(),
        "--parquet",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("1 could not be read"), "{stdout}");
    assert!(stdout.contains("truncated"), "{stdout}");
    let bad_name = bad.display().to_string();
    let ranks = read(&out, "ranks");
    let files = ranks.str("file");
    let errors = ranks.str("error");
    let i = files
        .iter()
        .position(|f| f.as_deref() == Some(&bad_name))
        .unwrap();
    assert!(
        errors[i].as_deref().unwrap().contains("truncated"),
        "{:?}",
        errors[i]
    );
    assert_eq!(ranks.i64("device")[i], None);
    for table in ["files", "suspects", "top_sites", "events", "stacks"] {
        let t = read(&out, table);
        assert!(t.rows() > 0, "{table}: the good file's rows");
        assert!(
            t.str("file")
                .iter()
                .all(|f| f.as_deref() != Some(&bad_name)),
            "{table}: no row of the bad file"
        );
    }
}

/// Nothing readable: the tables are written (ranks holds the errors) and the command
/// exits with status 2; the library says so with a typed error.
#[test]
fn nothing_readable_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("not_a_snapshot.pickle");
    std::fs::write(&bad, b"hello").unwrap();
    let missing = tmp.path().join("missing.pickle");
    let out = tmp.path().join("out");
    let (code, _, stderr) = run_cli(&[
        "export",
        bad.to_str().unwrap(),
        missing.to_str().unwrap(),
        "--parquet",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no file could be read"), "{stderr}");
    let ranks = read(&out, "ranks");
    assert_eq!(ranks.rows(), 2);
    assert!(ranks.str("error").iter().all(Option::is_some));
    assert_eq!(read(&out, "events").rows(), 0);

    let r = export_parquet(
        &[missing],
        &tmp.path().join("out2"),
        &ExportOptions::default(),
    );
    assert!(matches!(r, Err(ExportError::NothingRead { .. })), "{r:?}");
}

/// The library call gives the same tables as the command, and its summary's row counts
/// are the files' rows; the files table's pickle protocol is the file's.
#[test]
fn library_export_reports_its_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fixture("encodings/tiny_protocol4.pickle");
    let w = export_parquet(
        std::slice::from_ref(&f),
        tmp.path(),
        &ExportOptions::default(),
    )
    .unwrap();
    assert_eq!(w.files_read, 1);
    for t in &w.tables {
        assert_eq!(
            read(tmp.path(), t.table).rows() as u64,
            t.rows,
            "{}",
            t.table
        );
    }
    let files = read(tmp.path(), "files");
    assert!(files.i32("pickle_protocol").iter().all(|p| *p == Some(4)));
    let events = read(tmp.path(), "events");
    let snap = load(&f);
    let n: usize = snap.device_traces.iter().flatten().map(|t| t.len()).sum();
    assert_eq!(events.rows(), n);
    // time_us is null exactly where the event had none.
    let timed = events.i64("time_us").iter().filter(|t| t.is_some()).count();
    let expected = snap
        .device_traces
        .iter()
        .flatten()
        .flat_map(|t| &t.meta)
        .filter(|m| snap.meta(**m).has(leakscope::model::flags::TIME))
        .count();
    assert_eq!(timed, expected);
}

/// A run directory whose ranks have six steps each: `series.parquet` holds each rank's
/// verdict across steps, rank 0 (the generator's logits kept per step) leaking what its
/// truth says per step, rank 1 (the control) with no suspect.
#[test]
fn export_of_a_run_directory_has_each_ranks_series() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let scen = fixture("scenarios");
    let truth = crate::common::read_json(&scen.join("series_kept_per_step/truth.json"));
    let files: Vec<&str> = truth["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for (i, f) in files.iter().enumerate() {
        let step = run.join(format!("step{}", i + 1));
        std::fs::create_dir_all(&step).unwrap();
        std::fs::copy(
            scen.join("series_kept_per_step").join(f),
            step.join("m_rank0.pickle"),
        )
        .unwrap();
        std::fs::copy(
            scen.join("series_control").join(f),
            step.join("m_rank1.pickle"),
        )
        .unwrap();
    }
    let out = dir.path().join("tables");
    let (code, _, err) = crate::common::run_cli(&[
        "export",
        run.to_str().unwrap(),
        "--parquet",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let t = read(&out, "series");
    assert_eq!(t.rows(), 2);
    let rows: Vec<_> = (0..2).map(|i| t.row(i)).collect();
    let rank = |r: u64| rows.iter().find(|x| x["rank"] == r).unwrap();
    assert_eq!(rank(0)["steps"], files.len() as u64);
    assert_eq!(rank(0)["top_kind"], "leak");
    assert_eq!(rank(0)["top_site"], truth["kept_site"]);
    assert_eq!(
        rank(0)["top_bytes_per_step"],
        truth["bytes_per_snapshot_requested"]
    );
    assert_eq!(rank(0)["top_onset_step"], "2");
    assert_eq!(rank(1)["suspects"], 0);
    assert_eq!(rank(1)["top_site"], serde_json::Value::Null);
}
