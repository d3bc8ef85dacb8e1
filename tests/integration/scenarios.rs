//! The scenario fixtures of `fixtures/scenarios/` (written by `fixtures/gen/generate.py`
//! from a model of the caching allocator) against the generator's ground truth and
//! against CPython's reading of the same files.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

fn scenario_pickles() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![fixture("scenarios")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "pickle") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn scenarios_match_cpython() {
    let expected = read_json(&root().join("tests/expected/scenarios_summary.json"));
    let base = fixture("scenarios");
    let files = scenario_pickles();
    assert!(files.len() >= 15);
    let mut failures = Vec::new();
    for p in files {
        let rel = p.strip_prefix(&base).unwrap().display().to_string();
        let key = format!("scenarios/{rel}");
        assert!(expected[&key].is_object(), "no CPython reference for {key}");
        let diffs = diff_against_cpython(&summary_json(&load(&p), &key), &expected[&key]);
        if !diffs.is_empty() {
            failures.push(format!("{key}:\n  {}", diffs.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn scenarios_match_ground_truth() {
    for (stem, file_truth) in scenario_truths() {
        let stem = stem.as_str();
        let snap = load(&fixture(&format!("scenarios/{stem}.pickle")));
        let s = summary_json(&snap, stem);
        if file_truth["devices"].is_array() {
            // A multi-device file's totals are over every device.
            for f in [
                "segments",
                "blocks",
                "reserved_bytes",
                "allocated_bytes",
                "trace_events",
            ] {
                assert_eq!(
                    s["totals"][f], file_truth["summary"][f],
                    "{stem}: total {f}"
                );
            }
        }
        for (dev, truth) in device_truths(&file_truth) {
            let d = device_of(&s, dev, stem).clone();
            let t = &truth["summary"];
            for f in TRUTH_DEVICE_FIELDS {
                assert_eq!(d[f], t[f], "{stem} device {dev}: {f}");
            }
            for f in ["pre_trace_blocks", "unmatched_frees"] {
                if let Some(v) = truth.get(f) {
                    assert_eq!(&d[f], v, "{stem} device {dev}: {f}");
                }
            }
            if truth["max_entries"].is_number() {
                assert!(
                    s["trace"]["wrapped"].as_bool().unwrap(),
                    "{stem}: a truncated ring must read as wrapped"
                );
            }
        }
    }
}

#[test]
fn npu_shaped_file_is_recognised() {
    let snap = load(&fixture("scenarios/npu_shaped.pickle"));
    let s = summary_json(&snap, "npu");
    assert_eq!(s["format"]["producer"], "npu");
    assert_eq!(s["trace"]["has_time_us"], false);
    assert_eq!(s["trace"]["first_time_us"], serde_json::Value::Null);
    assert_eq!(s["totals"]["devices"], 8);
    assert!(
        s["totals"]["actions"]["workspace_snapshot"]
            .as_u64()
            .unwrap()
            >= 1
    );
    assert_eq!(
        s["top_keys"],
        serde_json::json!(["segments", "device_traces"])
    );
}

#[test]
fn every_verl_rank_file_loads() {
    let dir = fixture("scenarios/verl_ranks");
    let truth = read_json(&dir.join("truth.json"));
    let files = truth["files"].as_array().expect("truth lists files");
    assert_eq!(files.len(), 8);
    for f in files {
        let rel = f["path"].as_str().expect("file path");
        let snap = load(&dir.join(rel));
        let s = summary_json(&snap, rel);
        for k in [
            "segments",
            "blocks",
            "active_blocks",
            "reserved_bytes",
            "allocated_bytes",
            "trace_events",
            "actions",
        ] {
            assert_eq!(s["totals"][k], f["summary"][k], "{rel}: {k}");
        }
    }
}

fn same_tree(a: &Path, b: &Path) -> Vec<String> {
    let mut diffs = Vec::new();
    for e in std::fs::read_dir(a).unwrap() {
        let p = e.unwrap().path();
        let q = b.join(p.file_name().unwrap());
        if p.is_dir() {
            diffs.extend(same_tree(&p, &q));
        } else if std::fs::read(&p).ok() != std::fs::read(&q).ok() {
            diffs.push(p.display().to_string());
        }
    }
    diffs
}

/// The committed fixtures are exactly what the generators write.
#[test]
fn regenerating_fixtures_gives_identical_bytes() {
    if !have_python() {
        eprintln!("regenerating_fixtures_gives_identical_bytes: skipped (no python3)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for (script, out, committed) in [
        ("fixtures/gen/generate.py", "scenarios", "scenarios"),
        ("fixtures/gen/tiny_encodings.py", "encodings", "encodings"),
    ] {
        let dest = tmp.path().join(out);
        let st = Command::new("python3")
            .arg(root().join(script))
            .arg("--out")
            .arg(&dest)
            .env("PYTHONHASHSEED", "random")
            .status()
            .unwrap();
        assert!(st.success(), "{script} failed");
        let diffs = same_tree(&fixture(committed), &dest);
        assert!(
            diffs.is_empty(),
            "{script} wrote different bytes for: {diffs:?}"
        );
        let back = same_tree(&dest, &fixture(committed));
        assert!(
            back.is_empty(),
            "{script} wrote files not committed: {back:?}"
        );
    }
}
