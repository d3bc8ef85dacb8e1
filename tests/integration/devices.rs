//! Every device by default, and snapshots with nothing recorded: each command covers
//! every device that has segments or trace events, sums up the empty ones in one line,
//! and exits 0 with a note on a file that holds nothing.

use leakscope::analysis::At;

use crate::common::*;

const EMPTY: &[&str] = &[
    "encodings/empty_no_devices.pickle",
    "encodings/empty_traces.pickle",
    "encodings/empty_segment_list.pickle",
];

fn run(args: &[&str]) -> (i32, String, String) {
    run_cli(args)
}

/// CPython's reading of the empty files (tests/expected/cpython_summary.py) agrees.
#[test]
fn empty_snapshots_summarise_as_cpython_reads_them() {
    let expected = read_json(&root().join("tests/expected/encodings_summary.json"));
    for f in EMPTY {
        let ours = summary_json(&load(&fixture(f)), f);
        let diffs = diff_against_cpython(&ours, &expected[*f]);
        assert!(diffs.is_empty(), "{f}: {diffs:?}");
    }
}

#[test]
fn every_command_exits_0_on_a_snapshot_with_nothing_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let budget = dir.path().join("b.toml");
    std::fs::write(&budget, "[leaks]\nmax_bytes_per_window = \"1 MiB\"\n").unwrap();
    for f in EMPTY {
        let p = fixture(f);
        let p = p.to_str().unwrap();
        let svg = dir.path().join("f.svg");
        let html = dir.path().join("r.html");
        let b = budget.to_str().unwrap();
        let commands: Vec<Vec<&str>> = vec![
            vec!["summary", p],
            vec!["top", p],
            vec!["top", "--at", "peak", p],
            vec!["leaks", p],
            vec!["windows", p],
            vec!["tree", p],
            vec!["segments", p],
            vec!["oom", p],
            vec!["compare", p, p],
            vec!["check", p, "--budget", b],
            vec!["report", p, "-o", html.to_str().unwrap()],
            vec!["flamegraph", p, "-o", svg.to_str().unwrap()],
            vec!["flamegraph", "--folded", p],
        ];
        for args in commands {
            let (code, out, err) = run(&args);
            assert_eq!(code, 0, "{args:?}: {err}");
            assert!(
                (out.clone() + &err).contains("nothing recorded"),
                "{args:?}: no note in {out:?} {err:?}"
            );
        }
        // The SVG is valid XML that says why it is empty.
        let text = std::fs::read_to_string(&svg).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("the empty SVG is XML");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        assert!(text.contains("nothing recorded"));
        for args in [vec!["leaks", p, "--json"], vec!["top", p, "--json"]] {
            let (_, out, _) = run(&args);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert!(v["devices"].as_array().unwrap().is_empty(), "{args:?}");
        }
    }
}

/// The real torch_npu dump of two runs on two NPUs (and six visible ones that recorded
/// nothing): `top --at end` covers both devices, and their rows add up to the requested
/// bytes `summary` reports (CPython's number: tests/expected/corpus_summary.json).
#[test]
fn corpus_multi_device_top_sums_to_summary() {
    let Some(corpus) = corpus("corpus_multi_device_top_sums_to_summary") else {
        return;
    };
    let path = corpus.join("torch_npu/snapshot_with_multi_devices.pkl");
    let expected = read_json(&root().join("tests/expected/corpus_summary.json"));
    let want =
        expected["real/torch_npu/snapshot_with_multi_devices.pkl"]["totals"]["requested_bytes"]
            .as_u64()
            .unwrap();
    assert_eq!(want, 408_384_288);
    let r = session(&path)
        .top(&leakscope::Options::default(), At::End, usize::MAX)
        .unwrap();
    assert_eq!(
        r.devices.iter().map(|d| d.device).collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(r.idle_devices, [2, 3, 4, 5, 6, 7]);
    let rows: u64 = r
        .devices
        .iter()
        .flat_map(|d| d.rows.iter().map(|x| x.bytes))
        .sum();
    assert_eq!(rows, want);
    let (code, out, _) = run(&["top", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("device 0, at end"), "{out}");
    assert!(out.contains("device 1, at end"), "{out}");
    assert!(out.ends_with("devices 2-7: nothing recorded\n"), "{out}");
}

/// A device that is not in the file is a usage error naming the devices there are.
#[test]
fn an_unknown_device_is_a_usage_error() {
    let f = fixture("scenarios/two_devices_recv_leak.pickle");
    let (code, _, err) = run(&["leaks", f.to_str().unwrap(), "--device", "5"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no device 5") && err.contains("[0, 1]"),
        "{err}"
    );
    let (code, out, _) = run(&["segments", f.to_str().unwrap(), "--device", "1", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 1);
    assert_eq!(v["devices"][0]["device"], 1);
}

/// `--at event:N` past one device's trace but inside another's: the point is shown where
/// it exists, and where it does not the report says why.
#[test]
fn a_point_missing_on_one_device_is_reported_not_fatal() {
    let f = fixture("scenarios/two_devices_recv_leak.pickle");
    let truth = read_json(&fixture("scenarios/two_devices_recv_leak.truth.json"));
    let events = |d: usize| {
        truth["devices"][d]["summary"]["trace_events"]
            .as_u64()
            .unwrap()
    };
    let (short, long) = (events(1), events(0));
    assert!(short < long);
    let at = format!("event:{}", short + 10);
    let (code, out, _) = run(&["top", f.to_str().unwrap(), "--at", &at, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 1);
    assert_eq!(v["devices"][0]["device"], 0);
    assert_eq!(v["unresolved"][0]["device"], 1);
    assert!(
        v["unresolved"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("past the end")
    );
    let (code, _, err) = run(&["top", f.to_str().unwrap(), "--at", &format!("event:{long}")]);
    assert_eq!(code, 2, "no device has that event");
    assert!(err.contains("past the end"), "{err}");
}
