//! The allocator's state at past points against bookkeeping done without a model of
//! blocks or segments (`tests/expected/replay_points.py`, CPython), and hand-written
//! snapshots whose every number is worked out in the comments.

use leakscope::replay::AllocatorState;

use crate::common::*;

/// Every real file with a trace, every device, after every 100th event: the reserved and
/// requested bytes of the reconstructed state are the bookkeeping's, expandable segments
/// (`segment_map`/`segment_unmap`) included.
#[test]
fn past_points_match_independent_bookkeeping() {
    let Some(corpus) = corpus("past_points_match_independent_bookkeeping") else {
        return;
    };
    let expected = read_json(&root().join("tests/expected/corpus_replay_points.json"));
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (key, per_device) in expected.as_object().unwrap() {
        let path = corpus.join(key.strip_prefix("real/").unwrap());
        let snap = load(&path);
        for view in snap.devices() {
            let Some(points) = per_device[view.device.to_string()].as_array() else {
                continue;
            };
            let replay = leakscope::replay::replay(&view);
            for p in points {
                let k = p[0].as_u64().unwrap() as u32;
                let st = AllocatorState::after(&view, &replay, Some(k));
                let want = (p[1].as_u64().unwrap(), p[2].as_u64().unwrap());
                let got = (st.reserved(), st.requested());
                if got != want {
                    wrong.push(format!(
                        "{key} device {} after event {k}: reserved/requested {got:?}, bookkeeping {want:?}",
                        view.device
                    ));
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 900, "{checked} points");
    assert!(
        wrong.is_empty(),
        "{} of {checked} points differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// `segments --at event:N` on the expandable-segments NPU file says what the bookkeeping
/// says (the example: 155,189,248 B reserved after event 0, not 643,825,664 B).
#[test]
fn segments_at_a_past_event_of_an_expandable_run() {
    let Some(corpus) = corpus("segments_at_a_past_event_of_an_expandable_run") else {
        return;
    };
    let expected = read_json(&root().join("tests/expected/corpus_replay_points.json"));
    let key = "real/torch_npu/snapshot_expandable.pkl";
    let path = corpus.join("torch_npu/snapshot_expandable.pkl");
    for p in expected[key]["0"].as_array().unwrap().iter().step_by(20) {
        let k = p[0].as_u64().unwrap();
        let v = leakscope_json(&[
            "segments",
            path.to_str().unwrap(),
            "--at",
            &format!("event:{k}"),
        ]);
        let t = &device_of(&v, 0, key)["totals"];
        assert_eq!(t["reserved_bytes"], p[1], "after event {k}");
        assert_eq!(t["requested_bytes"], p[2], "after event {k}");
    }
}

// ------------------------------------------------------------------ hand-written snapshots

use serde_json::{Value, json};

use crate::common::hand::*;

fn at(file: &str, command: &str, point: &str) -> Value {
    let v = leakscope_json(&[command, file, "--at", point]);
    device_of(&v, 0, file).clone()
}

/// An older trace's `free` means `free_completed`: the block is live from its alloc to
/// it, and nothing stays live forever.
#[test]
fn a_legacy_free_frees() {
    let (_d, f) = written(
        vec![segment(S, 2 * MIB, vec![block(S, 2 * MIB, 0, "inactive")])],
        vec![event("alloc", S, 1000), event("free", S, 1000)],
    );
    assert_eq!(at(&f, "top", "event:0")["at"]["requested_bytes"], 1000);
    assert_eq!(at(&f, "top", "end")["at"]["requested_bytes"], 0);
    let s = leakscope_json(&["summary", &f]);
    assert_eq!(s["devices"][0]["actions"]["free"], 1);
    assert_eq!(s["trace"]["unmatched_frees"], 0);
    assert!(
        !s["warnings"].to_string().contains("unknown"),
        "{}",
        s["warnings"]
    );
    // After the alloc the segment map holds the block: 1000 bytes rounded to 1024.
    let t = &at(&f, "segments", "event:0")["totals"];
    assert_eq!(
        (t["allocated_bytes"].as_u64(), t["requested_bytes"].as_u64()),
        (Some(1024), Some(1000))
    );
}

/// An `oom` event that carries `addr` as well keeps its `device_free`.
#[test]
fn an_oom_with_an_address_keeps_device_free() {
    let mut oom = event("oom", 0, 50 * MIB);
    oom["device_free"] = json!(123 * MIB);
    let (_d, f) = written(
        vec![segment(
            S,
            20 * MIB,
            vec![block(S, 20 * MIB, 0, "inactive")],
        )],
        vec![
            event("alloc", S, 1000),
            event("free_requested", S, 1000),
            event("free_completed", S, 1000),
            oom,
        ],
    );
    let v = leakscope_json(&["oom", &f]);
    let o = &device_of(&v, 0, &f)["oom"];
    assert_eq!(o["device_free_bytes"], 123 * MIB);
    assert_eq!(o["request_bytes"], 50 * MIB);
}

/// A block pending its free: `allocated` leaves it out, `active` and `requested` keep it,
/// in `summary`, `segments`, `oom` and `check` alike. By hand: a 512-byte block (500
/// requested) allocated and a 1 KiB block (1000 requested) pending, in a 2 MiB segment.
#[test]
fn a_pending_free_block_is_active_not_allocated_everywhere() {
    let (_d, f) = written(
        vec![segment(
            S,
            2 * MIB,
            vec![
                block(S, 512, 500, "active_allocated"),
                block(S + 512, 1024, 1000, "active_pending_free"),
                block(S + 1536, 2 * MIB - 1536, 0, "inactive"),
            ],
        )],
        vec![
            event("alloc", S, 500),
            event("alloc", S + 512, 1000),
            event("free_requested", S + 512, 1000),
        ],
    );
    let s = leakscope_json(&["summary", &f]);
    let t = &s["totals"];
    assert_eq!(
        (
            t["allocated_bytes"].as_u64(),
            t["active_bytes"].as_u64(),
            t["requested_bytes"].as_u64()
        ),
        (Some(512), Some(1536), Some(1500))
    );
    for point in ["end", "event:2"] {
        let t = &at(&f, "segments", point)["totals"];
        assert_eq!(t["allocated_bytes"], 512, "{point}");
        assert_eq!(t["active_bytes"], 1536, "{point}");
        assert_eq!(t["requested_bytes"], 1500, "{point}");
    }
    // Before the free_requested both blocks are allocated.
    let t = &at(&f, "segments", "event:1")["totals"];
    assert_eq!(
        (t["allocated_bytes"].as_u64(), t["active_bytes"].as_u64()),
        (Some(1536), Some(1536))
    );
    let v = leakscope_json(&["oom", &f]);
    let o = device_of(&v, 0, &f);
    assert_eq!(
        (
            o["allocated_bytes"].as_u64(),
            o["active_bytes"].as_u64(),
            o["requested_bytes"].as_u64()
        ),
        (Some(512), Some(1536), Some(1500))
    );
    // check: 512 allocated at the end fits a 600-byte limit only if the pending block is
    // left out; the peak of requested bytes is 1500.
    let dir = tempfile::tempdir().unwrap();
    let budget = dir.path().join("b.toml");
    std::fs::write(
        &budget,
        "[memory]\nend_allocated = 600\npeak_requested = 1500\n",
    )
    .unwrap();
    let (code, out, err) = run_cli(&["check", &f, "--budget", budget.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let c: Value = serde_json::from_str(&out).unwrap();
    let m = &c["files"][0]["devices"][0]["measured"];
    assert_eq!(
        (m["end_allocated"].as_u64(), m["peak_requested"].as_u64()),
        (Some(512), Some(1500))
    );
}

/// A block the final state holds with no alloc in the trace, at an address the trace
/// shows allocated and freed: it began after that free, so the address is counted once.
/// By hand: a traced 1000-byte allocation at S (events 0-2), then 512 bytes at S+4096
/// (event 3); the final state holds S (4000 requested) and S+4096.
#[test]
fn an_address_is_counted_once() {
    let (_d, f) = written(
        vec![segment(
            S,
            2 * MIB,
            vec![
                block(S, 4096, 4000, "active_allocated"),
                block(S + 4096, 512, 512, "active_allocated"),
                block(S + 4608, 2 * MIB - 4608, 0, "inactive"),
            ],
        )],
        vec![
            event("alloc", S, 1000),
            event("free_requested", S, 1000),
            event("free_completed", S, 1000),
            event("alloc", S + 4096, 512),
        ],
    );
    let requested = |p: &str| at(&f, "top", p)["at"]["requested_bytes"].as_u64().unwrap();
    assert_eq!(requested("event:0"), 1000, "not 1000 + 4000");
    assert_eq!(requested("event:2"), 0, "S is free after its free");
    assert_eq!(requested("event:3"), 4000 + 512);
    assert_eq!(requested("end"), 4512);
    let (_, _, err) = run_cli(&["leaks", &f]);
    assert!(
        !err.contains("disagree"),
        "a late block is not a contradiction: {err}"
    );
}

/// Input no allocator produces is counted and said once, and the analyses still run: a
/// segment whose blocks leave a gap, a free_requested of nothing, a segment alloc the
/// final state has no room for (reserved would be negative before it).
#[test]
fn inconsistent_input_is_counted_and_warned_once() {
    let (_d, f) = written(
        vec![segment(S, 2 * MIB, vec![block(S, MIB, 0, "inactive")])],
        vec![
            event("segment_alloc", S + 4 * MIB, 20 * MIB),
            event("free_requested", S + 64, 100),
        ],
    );
    let v = leakscope_json(&["leaks", &f]);
    let c = &v["disagreements"][0];
    assert_eq!(c["segments_not_covered"], 1, "{c}");
    assert_eq!(c["stray_free_requests"], 1, "{c}");
    // Reserved at the end is 2 MiB; undoing a 20 MiB segment alloc leaves -18 MiB before it.
    assert_eq!(c["negative_reserved"], 1, "{c}");
    let (code, _, err) = run_cli(&["leaks", &f]);
    assert_eq!(code, 0);
    assert_eq!(err.matches("disagree").count(), 1, "once: {err}");
    for words in [
        "do not tile",
        "frees no allocation",
        "reserved would be negative",
    ] {
        assert!(err.contains(words), "{words}: {err}");
    }
}

/// `report`'s peak reserved is the most reserved at any point: the reserved timeline's
/// maximum (with the point before the first event), on every real file and device; a
/// device without trace events has only that point, its final reserved bytes.
#[test]
fn report_peak_reserved_is_the_timelines_maximum() {
    let Some(corpus) = corpus("report_peak_reserved_is_the_timelines_maximum") else {
        return;
    };
    let expected = read_json(&root().join("tests/expected/corpus_replay_points.json"));
    let summaries = read_json(&root().join("tests/expected/corpus_summary.json"));
    let (mut checked, mut traceless) = (0, 0);
    for (key, summary) in summaries.as_object().unwrap() {
        let Some(name) = key.strip_prefix("real/") else {
            continue;
        };
        let path = corpus.join(name);
        let v = leakscope_json(&["report", path.to_str().unwrap()]);
        for d in v["devices"].as_array().unwrap() {
            let dev = d["device"].to_string();
            let t = &d["timeline"];
            // The timeline keeps every bucket's extremes, so its maximum is the series'.
            let timeline_max = t["reserved"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_u64)
                .chain(t["initial_reserved"].as_u64())
                .max()
                .unwrap();
            assert_eq!(
                d["peak_reserved_bytes"].as_u64(),
                Some(timeline_max),
                "{key} {dev}"
            );
            // The bookkeeping's most reserved over its points bounds it from below.
            match expected[key][&dev].as_array() {
                Some(points) => {
                    let sampled = points.iter().filter_map(|p| p[1].as_u64()).max().unwrap();
                    assert!(timeline_max >= sampled, "{key} {dev}");
                }
                None => {
                    // No trace: the final state is every point.
                    let reserved = summary["devices"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|s| s["device"] == d["device"])
                        .and_then(|s| s["reserved_bytes"].as_u64());
                    assert_eq!(Some(timeline_max), reserved, "{key} {dev}");
                    traceless += 1;
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 18 && traceless >= 2, "{checked} {traceless}");
}

/// The stack that freed an allocation is its free event's, and an allocation closed by a
/// second `alloc` at its address (the trace lost its free) has none. By hand: A (100 B at
/// S, line 10) freed by events at line 20; B (200 B at S+512, line 30) closed by C's alloc
/// (256 B at S+512, line 40), which the final segment holds. Requested after each event:
/// 100, 100, 0, 200, then 256 (B's 200 gone, C's 256 come at the same event).
#[test]
fn the_freeing_stack_is_the_free_events() {
    let (_d, f) = written(
        vec![segment(
            S,
            2 * MIB,
            vec![
                block(S, 512, 0, "inactive"),
                block(S + 512, 512, 256, "active_allocated"),
                block(S + 1024, 2 * MIB - 1024, 0, "inactive"),
            ],
        )],
        vec![
            event_at("alloc", S, 100, 10),
            event_at("free_requested", S, 100, 20),
            event_at("free_completed", S, 100, 20),
            event_at("alloc", S + 512, 200, 30),
            event_at("alloc", S + 512, 256, 40),
        ],
    );
    let snap = load(std::path::Path::new(&f));
    let view = snap.devices().remove(0);
    let r = leakscope::replay::replay(&view);
    let line = |st: leakscope::model::StackId| {
        let frame = snap.stacks.get(st)[0];
        snap.frames.get(frame).line.value()
    };
    let freed: Vec<Option<u32>> = r.lifetimes.iter().map(|l| l.freed).collect();
    assert_eq!(freed, vec![Some(2), Some(4), None]);
    let free_lines: Vec<Option<i128>> = r
        .lifetimes
        .iter()
        .map(|l| l.free_stack(view.trace).map(line))
        .collect();
    assert_eq!(free_lines, vec![Some(20), None, None]);
    assert_eq!(r.requested, vec![100, 100, 0, 200, 256]);
    assert_eq!((r.initial_requested, r.double_allocs), (0, 1));
}
