//! `leakscope slice`: a range of a trace written as a pickle that CPython loads, whose
//! replay (by tests/expected/replay_points.py, independent of leakscope) gives the same
//! reserved and requested bytes after each event as the original at the same events, and
//! whose final state leakscope reads back as the original's state at the range's end.

use std::path::{Path, PathBuf};

use crate::common::{fixture, have_python, leakscope_json, root, run_cli};

/// 3321 events on its one device, 54 annotations.
const ONE_DEVICE: &str = "scenarios/control_no_leak.pickle";
/// 2659 events on device 0, 1605 on device 1.
const TWO_DEVICES: &str = "scenarios/two_devices_recv_leak.pickle";

/// Runs `slice INPUT ARGS -o OUT --json` and returns its report.
fn slice(input: &Path, out: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["slice", input.to_str().unwrap()];
    all.extend_from_slice(args);
    all.extend(["-o", out.to_str().unwrap()]);
    leakscope_json(&all)
}

/// tests/expected/slice_series.py on device `device` of the slice, whose first event is
/// the original's event `first`.
fn cpython_compare(orig: &Path, out: &Path, device: i64, first: u64) -> serde_json::Value {
    let script = root().join("tests/expected/slice_series.py");
    let o = std::process::Command::new("python3")
        .arg(&script)
        .arg(orig)
        .arg(out)
        .arg(device.to_string())
        .arg(first.to_string())
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success(),
        "slice_series.py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("the script prints JSON")
}

/// The CPython replay of the slice agrees with the original's, event for event.
fn assert_replays_alike(orig: &Path, out: &Path, device: i64, first: u64, events: u64) {
    let c = cpython_compare(orig, out, device, first);
    assert_eq!(c["events"], events, "{c}");
    assert_eq!(
        c["same_events"], true,
        "event dicts differ from the original's: {c}"
    );
    assert_eq!(c["mismatches"], 0, "{c}");
    eprintln!(
        "slice {} device {device}: events {first}..{} ({events}), {} numbers compared, 0 differ",
        orig.display(),
        first + events,
        c["compared"]
    );
}

/// `segments --json` of one device without the point (which names the slice's own index).
fn segments_of(file: &Path, at: &str, device: i64) -> serde_json::Value {
    let r = leakscope_json(&["segments", file.to_str().unwrap(), "--at", at]);
    let mut d = r["devices"]
        .as_array()
        .and_then(|v| v.iter().find(|d| d["device"] == device))
        .cloned()
        .unwrap_or_else(|| panic!("no device {device} in {r}"));
    d.as_object_mut().unwrap().remove("at");
    d
}

fn out_in(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// Events (1000, 2000] of a 3321-event trace: 1000 events, the same reserved and
/// requested bytes after each as the original after events 1001..=2000, annotations and
/// top-level keys kept; `summary` and `segments` read it, and its state is the
/// original's `segments --at event:2000`.
#[test]
fn slice_of_the_middle_replays_like_the_original() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    let orig = fixture(ONE_DEVICE);
    let dir = tempfile::tempdir().unwrap();
    let out = out_in(&dir, "middle.pickle");
    let r = slice(&orig, &out, &["--from", "event:1000", "--to", "event:2000"]);
    assert_eq!(r["schema"], "leakscope.slice/1");
    assert_eq!(
        (r["from_event"].as_u64(), r["to_event"].as_u64()),
        (Some(1000), Some(2000))
    );
    assert_eq!(r["devices"][0]["first_event"], 1001);
    assert_eq!(r["devices"][0]["events"], 1000);
    assert_eq!(r["devices"][0]["unresolved"], 0);
    assert!(
        r["annotations"].as_u64().unwrap() > 0,
        "annotations in range kept: {r}"
    );
    assert_replays_alike(&orig, &out, 0, 1001, 1000);
    let c = cpython_compare(&orig, &out, 0, 1001);
    assert_eq!(
        c["top_keys"],
        serde_json::json!([
            "segments",
            "device_traces",
            "allocator_settings",
            "external_annotations"
        ])
    );
    // leakscope reads it back: its end is the original's event 2000.
    assert_eq!(
        segments_of(&out, "end", 0),
        segments_of(&orig, "event:2000", 0)
    );
    let s = leakscope_json(&["summary", out.to_str().unwrap()]);
    assert_eq!(s["totals"]["trace_events"], 1000, "{s}");
    assert_eq!(
        s["totals"]["reserved_bytes"],
        r["devices"][0]["reserved_bytes"]
    );
}

/// Events after 2000 to the end (1320): the final state is the file's own segments,
/// and the replay agrees.
#[test]
fn slice_to_the_end_keeps_the_final_segments() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    let orig = fixture(ONE_DEVICE);
    let dir = tempfile::tempdir().unwrap();
    let out = out_in(&dir, "end.pickle");
    let r = slice(&orig, &out, &["--from", "event:2000", "--to", "end"]);
    assert_eq!(r["devices"][0]["events"], 1320);
    assert_eq!(r["devices"][0]["final_state"], true);
    assert_replays_alike(&orig, &out, 0, 2001, 1320);
    assert_eq!(segments_of(&out, "end", 0), segments_of(&orig, "end", 0));
}

/// Two devices: device 0's events (1000, 2000], device 1's events in the same time
/// range; both replay like the original, and each state is the original's after the
/// range's last event on that device.
#[test]
fn slice_of_two_devices_keeps_the_time_range() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    let orig = fixture(TWO_DEVICES);
    let dir = tempfile::tempdir().unwrap();
    let out = out_in(&dir, "two.pickle");
    let r = slice(&orig, &out, &["--from", "event:1000", "--to", "event:2000"]);
    let devs = r["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 2, "{r}");
    assert_eq!(r["reference_device"], 0);
    assert_replays_alike(&orig, &out, 0, 1001, 1000);
    let d1 = &devs[1];
    let (first, events) = (
        d1["first_event"].as_u64().unwrap(),
        d1["events"].as_u64().unwrap(),
    );
    assert!(events > 0, "device 1 has events in the range: {r}");
    assert_replays_alike(&orig, &out, 1, first, events);
    // The time range: device 1's events lie inside (time of event 1000, time of event 2000].
    let (lo, hi) = (
        r["time_from"]["at"].as_i64().unwrap(),
        r["time_to"]["at"].as_i64().unwrap(),
    );
    let orig_py = crate::common::cpython_json(&orig);
    let t1 = orig_py["device_traces"][1].as_array().unwrap();
    let times: Vec<i64> = t1.iter().map(|e| e["time_us"].as_i64().unwrap()).collect();
    let inside: Vec<usize> = (0..times.len())
        .filter(|&i| times[i] > lo && times[i] <= hi)
        .collect();
    assert_eq!(inside.first().copied(), Some(first as usize));
    assert_eq!(inside.len() as u64, events);
    let last = format!("event:{}", first + events - 1);
    assert_eq!(segments_of(&out, "end", 1), segments_of(&orig, &last, 1));
    assert_eq!(
        segments_of(&out, "end", 0),
        segments_of(&orig, "event:2000", 0)
    );
    // --device 1 writes device 1 alone.
    let only = out_in(&dir, "only1.pickle");
    let r = slice(
        &orig,
        &only,
        &["--device", "1", "--from", "start", "--to", "event:100"],
    );
    assert_eq!(r["devices"].as_array().unwrap().len(), 1);
    assert_replays_alike(&orig, &only, 1, 0, 101);
}

/// `--around peak --events 100` is `--from peak-100 --to peak+100`: 200 events.
#[test]
fn slice_around_the_peak() {
    let orig = fixture(ONE_DEVICE);
    let dir = tempfile::tempdir().unwrap();
    let a = slice(
        &orig,
        &out_in(&dir, "a.pickle"),
        &["--around", "peak", "--events", "100"],
    );
    let b = slice(
        &orig,
        &out_in(&dir, "b.pickle"),
        &["--from", "peak-100", "--to", "peak+100"],
    );
    assert_eq!(a["devices"][0]["events"], 200);
    assert_eq!(a["from_event"], b["from_event"]);
    assert_eq!(a["to_event"], b["to_event"]);
    let peak = leakscope_json(&["top", orig.to_str().unwrap(), "--at", "peak"]);
    let at = peak["devices"][0]["at"]["event_index"].as_u64().unwrap();
    assert_eq!(a["to_event"].as_u64(), Some(at + 100));
}

/// An output named like the input is refused with exit 2, before anything is written.
#[test]
fn slice_refuses_to_write_over_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = out_in(&dir, "run.pickle");
    std::fs::copy(fixture(ONE_DEVICE), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let same = dir.path().join(".").join("run.pickle");
    let (code, _, err) = run_cli(&[
        "slice",
        input.to_str().unwrap(),
        "--to",
        "event:10",
        "-o",
        same.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("it is the input"), "{err}");
    assert_eq!(std::fs::read(&input).unwrap(), before, "input untouched");
}

/// Points that are not points, past the trace, or a range without events: exit 2 with
/// the reason, and nothing written.
#[test]
fn slice_bad_points_are_usage_errors() {
    let orig = fixture(ONE_DEVICE);
    let dir = tempfile::tempdir().unwrap();
    let out = out_in(&dir, "x.pickle");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--from", "soon"],
            "use start, end, peak, oom, event:N or time:US",
        ),
        (
            &["--to", "peak+x"],
            "the offset after + or - must be a number of events",
        ),
        (
            &["--to", "event:99999"],
            "past the end of device 0's trace (3321 events)",
        ),
        (
            &["--from", "event:10", "--to", "event:5"],
            "the range holds no event",
        ),
        (&["--to", "oom"], "no oom event"),
        (&["--device", "7"], "no device 7"),
    ];
    for (args, says) in cases {
        let mut all = vec!["slice", orig.to_str().unwrap()];
        all.extend_from_slice(args);
        all.extend(["-o", out.to_str().unwrap()]);
        let (code, _, err) = run_cli(&all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?}: nothing written");
    }
}
