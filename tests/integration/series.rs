//! A series of state-only snapshots (one per step) read as a trace of windows: the
//! stitched trace against the generator's per-file bookkeeping, the verdicts against its
//! truth (leak, none, warm-up), the run-directory and `ranks` paths, the CLI.

use std::path::PathBuf;

use leakscope::Options;
use leakscope::analysis::Kind;
use leakscope::analysis::point::{At, resolve};
use leakscope::session::{SeriesOptions, Session};

use crate::common::{fixture, read_json, run_cli};

const SERIES: [&str; 3] = ["series_kept_per_step", "series_control", "series_warmup"];

fn files(name: &str) -> (Vec<PathBuf>, serde_json::Value) {
    let dir = fixture(&format!("scenarios/{name}"));
    let truth = read_json(&dir.join("truth.json"));
    let files = truth["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| dir.join(f.as_str().unwrap()))
        .collect();
    (files, truth)
}

fn open(name: &str) -> (Session, serde_json::Value) {
    let (files, truth) = files(name);
    let s = Session::open_series(&files, SeriesOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (s, truth)
}

/// After the first file's blocks and after each window, the stitched trace holds what the
/// generator's allocator held when that file was dumped (requested bytes), and the final
/// state is the last file's; every window boundary is where the next file's change starts.
#[test]
fn the_stitched_trace_holds_each_files_state_at_its_window_end() {
    for name in SERIES {
        let (s, truth) = open(name);
        let per_file = truth["per_file"].as_array().unwrap();
        let mut runs = s.runs(&Options::default()).unwrap();
        assert_eq!(runs.len(), 1, "{name}");
        let r = &mut runs[0];
        let w = r.windows().clone();
        assert_eq!(w.len(), per_file.len() - 1, "{name}: one window per change");
        assert_eq!(w.source.as_str(), "snapshots");
        let snap = s.snapshot();
        let requested_after = |events: u32| -> u64 {
            if events == 0 {
                return 0;
            }
            resolve(snap, &r.replay, At::Event(events - 1))
                .unwrap()
                .requested_bytes
        };
        // The first file is what precedes the first window.
        assert_eq!(
            requested_after(w.starts[0]),
            per_file[0]["requested_bytes"].as_u64().unwrap(),
            "{name}: file 0"
        );
        for k in 0..w.len() {
            let end = w.range(k).1;
            assert_eq!(
                requested_after(end),
                per_file[k + 1]["requested_bytes"].as_u64().unwrap(),
                "{name}: after window {k} (file {})",
                k + 1
            );
        }
        assert_eq!(
            r.view.allocated_bytes(),
            per_file.last().unwrap()["allocated_bytes"]
                .as_u64()
                .unwrap(),
            "{name}: the final state is the last file's"
        );
        let c = leakscope::replay::Consistency::of(&r.view, &r.replay);
        assert!(!c.disagrees(), "{name}: {c:?}");
    }
}

/// 4 x 64 MiB kept per step: a leak at the allocating site, 256 MiB per snapshot (within
/// 10%), from the window that ends at the truth's onset file.
#[test]
fn a_series_keeping_logits_per_step_is_a_leak_at_their_site() {
    let (s, truth) = open("series_kept_per_step");
    let report = s.leaks(&Options::default()).unwrap();
    let d = &report.devices[0];
    let top = d.suspects.first().expect("a suspect");
    assert_eq!(top.site.label, truth["kept_site"].as_str().unwrap());
    assert_eq!(top.kind, Kind::Leak);
    let want = truth["bytes_per_snapshot_requested"].as_u64().unwrap() as f64;
    let got = top.bytes_per_window as f64;
    assert!(
        (got - want).abs() <= want * 0.1,
        "{got} bytes per snapshot, truth {want}"
    );
    // The change up to file i is window i - 1.
    let onset = truth["onset_file_index"].as_u64().unwrap() - 1;
    assert_eq!(top.onset_window, onset);
    let files = truth["files"].as_array().unwrap();
    assert!(
        top.onset_name
            .as_deref()
            .unwrap()
            .ends_with(files[onset as usize + 1].as_str().unwrap()),
        "{:?}",
        top.onset_name
    );
    assert_eq!(d.suspects.len(), 1, "{:?}", d.suspects);
}

/// The same loop keeping nothing: no suspect.
#[test]
fn the_series_control_has_no_suspect() {
    let (s, truth) = open("series_control");
    assert_eq!(truth["expected_verdict"], "none");
    let report = s.leaks(&Options::default()).unwrap();
    let d = &report.devices[0];
    assert!(d.windows.verdicts);
    assert!(d.suspects.is_empty(), "{:?}", d.suspects);
}

/// Optimizer state made in the first step, then nothing: warm-up at the truth's site,
/// never a leak.
#[test]
fn a_series_with_optimizer_state_made_once_is_warm_up() {
    let (s, truth) = open("series_warmup");
    assert_eq!(truth["expected_verdict"], "warmup");
    let report = s.leaks(&Options::default()).unwrap();
    let d = &report.devices[0];
    assert!(d.suspects.is_empty(), "{:?}", d.suspects);
    let site = truth["warmup_site"].as_str().unwrap();
    let g = d
        .not_suspects
        .iter()
        .find(|g| g.site.label == site)
        .expect("the optimizer state's site");
    assert_eq!(g.kind, Kind::Warmup);
    assert_eq!(
        g.onset_window,
        truth["onset_file_index"].as_u64().unwrap() - 1
    );
}

/// Files given out of order (as a shell's glob gives step10 before step2) are read in
/// the order of their numbers: the verdict is the same.
#[test]
fn a_series_is_read_in_the_order_of_the_numbers_in_its_names() {
    let (mut files, truth) = files("series_kept_per_step");
    files.reverse();
    let s = Session::open_series(&files, SeriesOptions::default()).unwrap();
    let d = &s.leaks(&Options::default()).unwrap().devices[0];
    assert_eq!(
        d.suspects[0].site.label,
        truth["kept_site"].as_str().unwrap()
    );
    assert_eq!(d.suspects[0].windows_growing, 5);

    // The file names decide, not the folders: the first step in folder `b`, the rest in
    // `a`, reads the same.
    let dir = tempfile::tempdir().unwrap();
    let moved: Vec<PathBuf> = files
        .iter()
        .rev()
        .enumerate()
        .map(|(i, f)| {
            let sub = dir.path().join(if i == 0 { "b" } else { "a" });
            std::fs::create_dir_all(&sub).unwrap();
            let to = sub.join(f.file_name().unwrap());
            std::fs::copy(f, &to).unwrap();
            to
        })
        .collect();
    let s = Session::open_series(&moved, SeriesOptions::default()).unwrap();
    let d = &s.leaks(&Options::default()).unwrap().devices[0];
    assert_eq!(
        d.suspects[0].site.label,
        truth["kept_site"].as_str().unwrap()
    );
    assert_eq!(d.suspects[0].windows_growing, 5);
    assert_eq!(
        d.suspects[0].onset_window,
        truth["onset_file_index"].as_u64().unwrap() - 1
    );
}

/// A run directory with two ranks: `leaks DIR` asks which (exit 2), `leaks DIR --rank 0`
/// reads rank 0's files in step order, and `ranks DIR` gives each rank its verdict across
/// steps (rank 0 leaks 256 MiB per step since step 2; rank 1 keeps nothing).
#[test]
fn a_run_directorys_ranks_get_a_verdict_across_steps() {
    let dir = tempfile::tempdir().unwrap();
    let (kept, truth) = files("series_kept_per_step");
    let (control, _) = files("series_control");
    for (i, (k, c)) in kept.iter().zip(&control).enumerate() {
        let step = dir.path().join(format!("step{}", i + 1));
        std::fs::create_dir(&step).unwrap();
        std::fs::copy(k, step.join("memory_rank0.pickle")).unwrap();
        std::fs::copy(c, step.join("memory_rank1.pickle")).unwrap();
    }
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = run_cli(&["leaks", d]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--rank"), "{err}");
    let (code, out, err) = run_cli(&["leaks", d, "--rank", "0", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let top = &v["devices"][0]["suspects"][0];
    assert_eq!(top["site"]["label"], truth["kept_site"]);
    assert_eq!(
        top["bytes_per_window"],
        truth["bytes_per_snapshot_requested"]
    );

    let (code, out, err) = run_cli(&["ranks", d, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let series = v["series"].as_array().unwrap();
    assert_eq!(series.len(), 2, "{series:?}");
    let rank = |r: u64| series.iter().find(|x| x["rank"] == r).unwrap();
    assert_eq!(rank(0)["top_kind"], "leak");
    assert_eq!(rank(0)["top_site"]["label"], truth["kept_site"]);
    assert_eq!(
        rank(0)["top_bytes_per_step"],
        truth["bytes_per_snapshot_requested"]
    );
    assert_eq!(rank(0)["top_onset_step"], "2");
    assert_eq!(rank(1)["suspects"], 0);
    assert_eq!(rank(1)["verdicts"], true);
}

/// One file is no series; a file that cannot be read is named in the error (exit 2).
#[test]
fn a_series_needs_two_readable_files() {
    let (files, _) = files("series_control");
    let one = Session::open_series(&files[..1], SeriesOptions::default());
    assert!(one.is_err());
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("step_99.pickle");
    std::fs::write(&bad, b"\x80\x04not a pickle").unwrap();
    let (code, _, err) = run_cli(&[
        "leaks",
        files[0].to_str().unwrap(),
        files[1].to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("step_99.pickle"), "{err}");
}

/// A single state-only file cannot show growth: the leak finder says how to capture one
/// that can (a series, with the two lines of Python).
#[test]
fn one_state_only_file_gets_capture_advice() {
    let (files, _) = files("series_kept_per_step");
    let (code, out, err) = run_cli(&["leaks", files[0].to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("state only"), "{out}");
    assert!(
        out.contains("_record_memory_history(enabled=\"state\")"),
        "{out}"
    );
    assert!(out.contains("_dump_snapshot("), "{out}");
}

/// A traced file cut into two windows (`--windows every:N`, N half its events): too few
/// to judge; the advice is the `max_entries` that holds six windows at its rate, the
/// rate counted by hand from the events CPython reads.
#[test]
fn too_few_windows_get_the_max_entries_that_would_hold_six() {
    let path = fixture("scenarios/control_no_leak.pickle");
    let events = crate::common::cpython_json(&path)["device_traces"][0]
        .as_array()
        .unwrap()
        .len() as u64;
    let half = events.div_ceil(2);
    let (code, out, err) = run_cli(&[
        "leaks",
        path.to_str().unwrap(),
        "--windows",
        &format!("every:{half}"),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = &v["devices"][0]["capture"];
    assert_eq!(c["shortfall"], "too-few-windows");
    assert_eq!(c["events_per_window"], half);
    let six = half * 6;
    let mut unit = 1;
    while six / unit >= 100 {
        unit *= 10;
    }
    assert_eq!(c["max_entries"], six.div_ceil(unit) * unit);
    assert!(c["max_entries"].as_u64().unwrap() >= six);
}

/// Two run directories compared step by step at the end: each step's difference is the
/// generator's requested bytes of B's file minus A's, the kept rows and the rest add up to
/// it, and from the second step on the largest change is the kept logits' site.
#[test]
fn two_run_directories_compare_step_by_step() {
    let dir = tempfile::tempdir().unwrap();
    let (kept, truth_b) = files("series_kept_per_step");
    let (control, truth_a) = files("series_control");
    for (run, list) in [("a", &control), ("b", &kept)] {
        for (i, f) in list.iter().enumerate() {
            let step = dir.path().join(run).join(format!("step{}", i + 1));
            std::fs::create_dir_all(&step).unwrap();
            std::fs::copy(f, step.join("mem_rank0.pickle")).unwrap();
        }
    }
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let (code, out, err) = run_cli(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--at",
        "end",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "leakscope.compare_steps/1");
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), kept.len());
    for (k, s) in steps.iter().enumerate() {
        assert_eq!(s["step"], (k + 1).to_string());
        let d = &s["compare"]["devices"][0];
        let want = truth_b["per_file"][k]["requested_bytes"].as_i64().unwrap()
            - truth_a["per_file"][k]["requested_bytes"].as_i64().unwrap();
        assert_eq!(d["difference"].as_i64(), Some(want), "step {}", k + 1);
        let kept_rows: i64 = d["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["difference"].as_i64().unwrap())
            .sum();
        assert_eq!(kept_rows + s["rest_difference"][0].as_i64().unwrap(), want);
        assert_eq!(d["rows"][0]["site"]["label"], truth_b["kept_site"]);
    }
    // Without --at, or with one directory, it says how (exit 2).
    let (code, _, err) = run_cli(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--at"), "{err}");
}

/// Files with traces contribute them where they overlap: the first two thirds of a traced
/// scenario cut out with `slice` (each the state at its end and the events up to it), then
/// the whole file. Each later file's trace reaches back past the previous dump, so each
/// window holds exactly the original events after the previous cut (counted by CPython),
/// frees and their stacks included, and the verdict is the original trace's site.
#[test]
fn traced_files_bring_their_events_where_they_overlap() {
    let path = fixture("scenarios/plain_loop_kept_logits.pickle");
    let trace = crate::common::cpython_json(&path)["device_traces"][0]
        .as_array()
        .unwrap()
        .clone();
    let n = trace.len() as u64;
    let cuts = [n / 3, 2 * n / 3];
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (i, c) in cuts.iter().enumerate() {
        let out = dir.path().join(format!("part{i}.pickle"));
        let (code, _, err) = run_cli(&[
            "slice",
            path.to_str().unwrap(),
            "--from",
            "start",
            "--to",
            &format!("event:{c}"),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        files.push(out);
    }
    files.push(path.clone());
    let s = Session::open_series(&files, SeriesOptions::default()).unwrap();
    assert!(
        s.snapshot().warnings.iter().all(|w| !w.contains("trace")),
        "{:?}",
        s.snapshot().warnings
    );
    let mut runs = s.runs(&Options::default()).unwrap();
    let w = runs[0].windows().clone();
    // The cut at event c keeps events 0..=c; the next file adds those after it.
    assert_eq!(w.range(0).1 - w.range(0).0, (cuts[1] - cuts[0]) as u32);
    assert_eq!(w.range(1).1 - w.range(1).0, (n - 1 - cuts[1]) as u32);
    let t = s.snapshot().trace(0);
    let frees_with_stacks = (w.starts[0] as usize..t.len())
        .filter(|&i| {
            t.action[i] == leakscope::model::Action::FREE_COMPLETED
                && !s.snapshot().stacks.get(t.stack[i]).is_empty()
        })
        .count();
    let want = trace[cuts[0] as usize + 1..]
        .iter()
        .filter(|e| e["action"] == "free_completed" && !e["frames"].as_array().unwrap().is_empty())
        .count();
    assert_eq!(frees_with_stacks, want);
}
