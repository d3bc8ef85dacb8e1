//! The real snapshots (`LEAKSCOPE_CORPUS`, normally `../shared/fixtures/real`) and their
//! synthetic re-encodings beside it. Expected numbers come from CPython's `pickle`
//! (`tests/expected/cpython_summary.py` → `tests/expected/corpus_summary.json`).

use std::path::PathBuf;

use leakscope::LoadOptions;

use crate::common::*;

fn corpus_files(corpus: &std::path::Path) -> Vec<(String, PathBuf)> {
    let expected = read_json(&root().join("tests/expected/corpus_summary.json"));
    let synthetic = corpus.join("../synthetic");
    expected
        .as_object()
        .expect("corpus_summary.json is an object")
        .keys()
        .map(|k| {
            let path = if let Some(rest) = k.strip_prefix("real/") {
                corpus.join(rest)
            } else if let Some(rest) = k.strip_prefix("synthetic/") {
                synthetic.join(rest)
            } else {
                panic!("unexpected key {k}")
            };
            (k.clone(), path)
        })
        .collect()
}

#[test]
fn corpus_summaries_match_cpython() {
    let Some(corpus) = corpus("corpus_summaries_match_cpython") else {
        return;
    };
    let expected = read_json(&root().join("tests/expected/corpus_summary.json"));
    let files = corpus_files(&corpus);
    assert!(files.len() >= 24, "expected 18 real and 6 synthetic files");
    let mut failures = Vec::new();
    for (key, path) in &files {
        let snap = load(path);
        let diffs = diff_against_cpython(&summary_json(&snap, key), &expected[key]);
        if !diffs.is_empty() {
            failures.push(format!("{key}:\n  {}", diffs.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn corpus_reencodings_give_identical_summaries() {
    let Some(corpus) = corpus("corpus_reencodings_give_identical_summaries") else {
        return;
    };
    let syn = corpus.join("../synthetic");
    let groups: &[(&str, &[&str])] = &[
        (
            "cuda/era23to27_allocator_settings__small_cpp_frames__silmont2000_assignment2-systems.pickle",
            &[
                "SYNTHETIC_python_pickle_proto2__from_silmont2000.pickle",
                "SYNTHETIC_python_pickle_proto5__from_silmont2000.pickle",
                "SYNTHETIC_cpp_pickler_proto2__from_silmont2000.pickle",
            ],
        ),
        (
            "cuda/era20_history__oom_snapshot__Yiyi-philosophy_LLM-inference.pickle",
            &[
                "SYNTHETIC_python_pickle_proto2__from_yiyi_oom.pickle",
                "SYNTHETIC_python_pickle_proto5__from_yiyi_oom.pickle",
            ],
        ),
        (
            "torch_npu/snapshot_expandable.pkl",
            &["SYNTHETIC_cpp_pickler_proto2__from_npu_snapshot_expandable.pickle"],
        ),
    ];
    for (original, copies) in groups {
        let reference = content_only(summary_json(&load(&corpus.join(original)), ""));
        for c in *copies {
            let s = content_only(summary_json(&load(&syn.join(c)), ""));
            assert_eq!(s, reference, "{c} differs from {original}");
        }
    }
}

/// Every corpus file survives pickle → cache → JSON → cache with an identical model, and
/// its JSON export equals CPython's `json.dumps(pickle.load(f))`.
#[test]
fn corpus_convert_round_trip() {
    let Some(corpus) = corpus("corpus_convert_round_trip") else {
        return;
    };
    let python = have_python();
    for (key, path) in corpus_files(&corpus) {
        let snap = load(&path);
        let cache = leakscope::load::cache::encode(&snap).unwrap();
        let back = leakscope::load_bytes(&cache, LoadOptions::default()).unwrap();
        let mut a = snap.clone();
        a.format = back.format.clone();
        assert!(a == back, "{key}: cache round trip changed the model");
        let json = leakscope::convert::to_snapshot_json(&back);
        let text = serde_json::to_string(&json).unwrap();
        let again = leakscope::load_bytes(text.as_bytes(), LoadOptions::default()).unwrap();
        assert_eq!(
            leakscope::convert::to_snapshot_json(&again),
            json,
            "{key}: JSON round trip is not stable"
        );
        if python && !key.contains("cpp_pickler") {
            let theirs = cpython_json(&path);
            assert!(json == theirs, "{key}: JSON export differs from CPython's");
        }
    }
}

/// `summary` counts coverage with a lean pass; it must agree with the full replay that
/// `top`, `leaks` and `oom` use, on every real file and every scenario.
#[test]
fn corpus_coverage_agrees_with_full_replay() {
    let Some(corpus) = corpus("corpus_coverage_agrees_with_full_replay") else {
        return;
    };
    let mut paths: Vec<PathBuf> = corpus_files(&corpus).into_iter().map(|(_, p)| p).collect();
    paths.extend(
        std::fs::read_dir(fixture("scenarios"))
            .expect("fixtures/scenarios")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "pickle")),
    );
    let mut checked = 0;
    for path in &paths {
        let snap = load(path);
        for dev in snap.devices() {
            let full = leakscope::replay::replay(&dev);
            let lean = leakscope::replay::coverage(&dev);
            let want = leakscope::replay::Coverage {
                pre_trace_blocks: full.pre_trace_blocks,
                unmatched_frees: full.unmatched_frees,
                unmatched_segment_frees: full.unmatched_segment_frees,
                double_allocs: full.double_allocs,
                mismatches: full.mismatches.len() as u64,
            };
            assert_eq!(lean, want, "{} device {}", path.display(), dev.device);
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} devices checked");
}
