//! Replay and attribution (`top`) against the scenario ground truth and the real corpus.

use std::collections::BTreeMap;

use leakscope::analysis::{At, Point};
use leakscope::attribute::{FrameFilters, GroupBy};
use leakscope::session::Session;

use crate::common::*;

/// `top` by site with no limit on one device, as `{site: (bytes, blocks)}`, plus the point.
fn top_by_site(s: &Session, device: i64, at: At) -> (Point, BTreeMap<String, (u64, u64)>) {
    let opts = device_options(device, GroupBy::Site, FrameFilters::default());
    let report = s.top(&opts, at, usize::MAX).expect("point resolves");
    let d = &report.devices[0];
    let rows = d
        .rows
        .iter()
        .map(|r| (r.site.label.clone(), (r.bytes, r.blocks)))
        .collect();
    (d.at.clone(), rows)
}

/// `top` at end, at the peak and at the OOM equals the generator's ground truth exactly,
/// bytes and blocks per site, for every scenario.
#[test]
fn top_matches_scenario_ground_truth() {
    let mut checked = 0;
    for (stem, truth) in scenario_truths() {
        let stem = stem.as_str();
        let s = session(&fixture(&format!("scenarios/{stem}.pickle")));
        for (device, truth) in device_truths(&truth) {
            for (name, at) in [("end", At::End), ("peak", At::Peak), ("oom", At::Oom)] {
                let t = &truth[name];
                if t.is_null() {
                    continue;
                }
                let (point, rows) = top_by_site(&s, device, at);
                let expected = truth_groups(&t["by_site"]);
                assert_eq!(
                    rows, expected,
                    "{stem} at {name}: per-site bytes and blocks"
                );
                let live = t
                    .get("live_requested_bytes")
                    .or_else(|| t.get("requested_bytes_live"));
                if let Some(live) = live {
                    assert_eq!(
                        point.requested_bytes,
                        live.as_u64().unwrap(),
                        "{stem} at {name}: live bytes"
                    );
                }
                if let Some(ev) = t.get("event_index").and_then(|e| e.as_u64()) {
                    assert_eq!(
                        point.event_index,
                        Some(ev as u32),
                        "{stem} at {name}: event index"
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 18, "only {checked} points checked");
}

/// Real files: `top --at end` adds up to the requested bytes `summary` reports, and the
/// replayed end state matches `segments` wherever the trace did not wrap.
#[test]
fn corpus_top_adds_up_and_replay_matches_segments() {
    let Some(corpus) = corpus("corpus_top_adds_up_and_replay_matches_segments") else {
        return;
    };
    // Files whose trace misses part of the history (summary says `wrapped`), by name.
    const WRAPPED: &[&str] = &[
        "cuda/era20_history__1.3b_snapshot__Yiyi-philosophy_LLM-inference.pickle",
        "cuda/era20_history__oom_snapshot__Yiyi-philosophy_LLM-inference.pickle",
        "cuda/era210_compile_ctx_user_md__external_annotations__bcrafton_assignment2-systems.pickle",
        "cuda/era210_compile_ctx_user_md__windows__MAGMA27_assignment2-systems.pickle",
        "cuda/era21_frames_no_time_us__segment_free__Maphsge4_select_n.pickle",
        "cuda/era22_time_us__snapshot_action_dev1__Muduard_LayoutEditing.pickle",
        "cuda/era22_time_us__windows_tiny__jogregoire_How-Diffusion-Models-Work.pickle",
        "cuda/era23to27_allocator_settings__ctx128_forward__kkaitlyn111_cs336-a2-systems.pickle",
        "cuda/era23to27_allocator_settings__segment_alloc_free__MercuryB1_SQAttn.pickle",
        "torch_npu/snapshot_expandable.pkl",
        "torch_npu/snapshot_with_empty_cache.pkl",
        "torch_npu/snapshot_with_empty_cache_expandable.pkl",
        "torch_npu/snapshot_with_multi_devices.pkl",
    ];
    let mut files = Vec::new();
    let mut stack = vec![corpus.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_none_or(|x| x != "md") && !p.ends_with("SHA256SUMS") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert_eq!(files.len(), 18);
    let mut wrapped = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&corpus).unwrap().display().to_string();
        let sess = session(&path);
        let s = summary_json(sess.snapshot(), &rel);
        if s["trace"]["wrapped"].as_bool().unwrap() {
            wrapped.push(rel.clone());
        }
        // Every device at once, as `top --at end` reports them: the devices' totals add
        // up to the file's requested bytes.
        let all = sess
            .top(&leakscope::Options::default(), At::End, 5)
            .unwrap();
        let file_total: u64 = all.devices.iter().map(|d| d.total_bytes).sum();
        assert_eq!(
            file_total,
            s["totals"]["requested_bytes"].as_u64().unwrap(),
            "{rel}: every device's top adds up to summary's requested bytes"
        );
        for ds in s["devices"].as_array().unwrap() {
            let device = ds["device"].as_i64().unwrap();
            let opts = device_options(device, GroupBy::Site, FrameFilters::default());
            let mut runs = sess.runs(&opts).unwrap();
            let rep = &runs[0].replay;
            let report = &sess.top(&opts, At::End, 5).unwrap().devices[0];
            // Σ requested_size of active_allocated blocks (no real file has pending frees).
            let requested = ds["requested_bytes"].as_u64().unwrap();
            assert_eq!(
                report.total_bytes, requested,
                "{rel} device {device}: top total"
            );
            let shown: u64 = report.rows.iter().map(|r| r.bytes).sum::<u64>() + report.rest.bytes;
            assert_eq!(shown, requested, "{rel} device {device}: rows + rest");
            assert_eq!(
                report.at.requested_bytes, requested,
                "{rel} device {device}: timeline end"
            );
            // At the peak (before the first event in some wrapped files) the groups add up
            // to the timeline's live bytes too.
            let r = &sess.top(&opts, At::Peak, 5).unwrap().devices[0];
            assert_eq!(
                r.total_bytes, r.at.requested_bytes,
                "{rel} device {device}: peak"
            );
            if !ds["wrapped"].as_bool().unwrap() {
                assert!(
                    rep.mismatches.is_empty(),
                    "{rel} device {device}: replay differs from segments: {:?}",
                    &rep.mismatches[..rep.mismatches.len().min(5)]
                );
            }
            runs.clear();
        }
    }
    assert_eq!(wrapped, WRAPPED, "the wrapped files");
}

fn top_rows(
    path: &str,
    device: i64,
    at: At,
    by: GroupBy,
    filters: FrameFilters,
) -> (u64, BTreeMap<String, (u64, u64)>) {
    let s = session(&fixture(path));
    let r = s
        .top(&device_options(device, by, filters), at, usize::MAX)
        .unwrap();
    let r = &r.devices[0];
    (
        r.total_bytes,
        r.rows
            .iter()
            .map(|x| (x.site.label.clone(), (x.bytes, x.blocks)))
            .collect(),
    )
}

/// Hand arithmetic on `fixtures/gen/tiny_encodings.py`'s snapshot, device 0 at the end:
/// live are the 4 MiB - 100 block (stack: C++ malloc frame, forward, train_step), the
/// 8 MiB - 512 block allocated before the trace (forward, train_step) and the 3 MiB block
/// whose free was requested but not completed (adam step, train_step).
#[test]
fn groupings_on_the_tiny_snapshot() {
    let mib = 1u64 << 20;
    let fwd = 4 * mib - 100 + 8 * mib - 512;
    let adam = 3 * mib;
    let f = "encodings/tiny_protocol4.pickle";
    let (total, rows) = top_rows(f, 0, At::End, GroupBy::Site, FrameFilters::default());
    assert_eq!(total, fwd + adam);
    let expect: BTreeMap<String, (u64, u64)> = [
        ("/work/model.py:17:forward".to_string(), (fwd, 2)),
        (
            "/usr/lib/python3/site-packages/torch/optim/adam.py:178:step".to_string(),
            (adam, 1),
        ),
    ]
    .into();
    assert_eq!(rows, expect);

    // --by user: adam.py is an installed package, so its allocation goes to train_step.
    let (_, rows) = top_rows(f, 0, At::End, GroupBy::User, FrameFilters::default());
    let expect: BTreeMap<String, (u64, u64)> = [
        ("/work/model.py:17:forward".to_string(), (fwd, 2)),
        ("/work/train.py:42:train_step".to_string(), (adam, 1)),
    ]
    .into();
    assert_eq!(rows, expect);

    // --by file and function.
    let (_, rows) = top_rows(f, 0, At::End, GroupBy::File, FrameFilters::default());
    assert_eq!(rows["/work/model.py"], (fwd, 2));
    let (_, rows) = top_rows(f, 0, At::End, GroupBy::Function, FrameFilters::default());
    assert_eq!(rows["/work/model.py:forward"], (fwd, 2));

    // --by stack keeps the C++ frame of one stack apart (outermost first) ...
    let (_, rows) = top_rows(f, 0, At::End, GroupBy::Stack, FrameFilters::default());
    assert_eq!(rows.len(), 3);
    assert_eq!(
        rows["/work/train.py:42:train_step;/work/model.py:17:forward"],
        (8 * mib - 512, 1)
    );
    // ... unless --python-only drops it.
    let mut py = FrameFilters::default();
    py.python_only = true;
    let (_, rows) = top_rows(f, 0, At::End, GroupBy::Stack, py);
    assert_eq!(
        rows["/work/train.py:42:train_step;/work/model.py:17:forward"],
        (fwd, 2)
    );

    // --exclude hides a frame: the site moves to the caller.
    let mut ex = FrameFilters::default();
    ex.exclude = Some(regex::Regex::new("model.py").unwrap());
    let (total, rows) = top_rows(f, 0, At::End, GroupBy::Site, ex);
    assert_eq!(total, fwd + adam);
    assert_eq!(rows["/work/train.py:42:train_step"], (fwd, 2));

    // --focus keeps only allocations through a matching frame.
    let mut fo = FrameFilters::default();
    fo.focus = Some(regex::Regex::new(":step$").unwrap());
    let (total, _) = top_rows(f, 0, At::End, GroupBy::Site, fo);
    assert_eq!(total, adam);

    // Device 0 after event 3 (alloc of 2 MiB at forward): the unmatched free's 1000 bytes
    // are gone (event 0), the 4 MiB - 100 and 2 MiB allocations and the pre-trace block live.
    let (total, _) = top_rows(f, 0, At::Event(3), GroupBy::Site, FrameFilters::default());
    assert_eq!(total, (4 * mib - 100) + 2 * mib + (8 * mib - 512));
}
