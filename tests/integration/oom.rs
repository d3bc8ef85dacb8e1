//! `leakscope oom` against the fragmentation scenario's ground truth and the real OOM dump
//! (numbers from CPython: tests/expected/oom_reference.py).

use std::process::Command;

use crate::common::*;

/// `oom --json`'s explanation of the file's one explained device.
fn oom_json(path: &std::path::Path) -> serde_json::Value {
    let v = leakscope_json(&["oom", path.to_str().unwrap()]);
    assert_eq!(v["schema"], "leakscope.oom/5");
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "one device explained");
    devices[0].clone()
}

#[test]
fn fragmentation_oom_matches_ground_truth() {
    let truth = read_json(&fixture("scenarios/fragmentation_oom.truth.json"));
    let t = &truth["oom"];
    let v = oom_json(&fixture("scenarios/fragmentation_oom.pickle"));
    assert_eq!(v["oom"]["found"], true);
    assert_eq!(v["oom"]["event_index"], t["event_index"]);
    assert_eq!(v["oom"]["request_bytes"], t["requested_bytes"]);
    assert_eq!(v["oom"]["device_free_bytes"], t["device_free_bytes"]);
    for (ours, theirs) in [
        ("reserved_bytes", "reserved_bytes"),
        ("allocated_bytes", "allocated_bytes"),
        ("requested_bytes", "requested_bytes_live"),
        ("cached_free_bytes", "cached_free_bytes"),
        ("cached_free_in_pool_bytes", "cached_free_bytes_in_pool"),
        ("largest_free_block_bytes", "largest_free_block_bytes"),
        ("would_fit_if_contiguous", "would_fit_if_contiguous"),
    ] {
        assert_eq!(v[ours], t[theirs], "{ours}");
    }
    assert_eq!(
        v["largest_free_block_by_pool"]["small"],
        t["largest_free_block_by_pool"]["small"]
    );
    assert_eq!(
        v["largest_free_block_by_pool"]["large"],
        t["largest_free_block_by_pool"]["large"]
    );
    // 1 - largest / cached free, by hand from the truth's numbers.
    let frag = 1.0
        - t["largest_free_block_bytes"].as_f64().unwrap()
            / t["cached_free_bytes"].as_f64().unwrap();
    assert!((v["fragmentation"].as_f64().unwrap() - frag).abs() < 1e-9);
    let advice = v["advice"].as_array().unwrap();
    let frag = advice
        .iter()
        .find(|a| a["kind"] == "fragmentation")
        .unwrap_or_else(|| panic!("{advice:?}"));
    assert_eq!(frag["setting"], "PYTORCH_CUDA_ALLOC_CONF");
    assert_eq!(
        frag["largest_free_block_bytes"],
        t["largest_free_block_bytes"]
    );
    assert_eq!(frag["needed_bytes"], t["rounded_bytes"]);
    // Holders are site objects like every other output's.
    let h = &v["top_holders"][0]["site"];
    for k in ["name", "filename", "line", "label"] {
        assert!(h.get(k).is_some(), "top_holders[0].site.{k}");
    }
    // The holders at the failure are top --at oom's rows (checked against the truth in
    // attribution.rs); their sum is the live bytes.
    let held: u64 = v["top_holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(held, t["requested_bytes_live"].as_u64().unwrap());
}

#[test]
fn real_oom_dump_is_explained() {
    let Some(corpus) = corpus("real_oom_dump_is_explained") else {
        return;
    };
    let v = oom_json(&corpus.join(
        "cuda/era22_time_us__oom_event__pickle_named_json__Nesta-gitU_discrete_diffusion.json",
    ));
    let r = read_json(&root().join("tests/expected/oom_reference.json"));
    assert_eq!(v["oom"]["event_index"], r["event_index"]);
    assert_eq!(v["oom"]["request_bytes"], r["requested_bytes"]);
    assert_eq!(v["oom"]["device_free_bytes"], r["device_free_bytes"]);
    assert_eq!(v["reserved_bytes"], r["reserved_bytes"]);
    assert_eq!(v["requested_bytes"], r["requested_live_bytes"]);
    assert_eq!(v["reconstruction_unresolved"], 0);
    let reserved = v["reserved_bytes"].as_u64().unwrap();
    assert_eq!(
        v["cached_free_bytes"].as_u64().unwrap() + v["allocated_bytes"].as_u64().unwrap(),
        reserved
    );
    // 384 MiB asked, 252 MiB free in the driver, a few MiB cached: the device was full.
    assert_eq!(v["would_fit_if_contiguous"], false);
    let advice = v["advice"].as_array().unwrap();
    assert!(
        advice.iter().any(|a| a["kind"] == "device-full"),
        "{advice:?}"
    );
    assert!(
        !advice.iter().any(|a| a["kind"] == "fragmentation"),
        "{advice:?}"
    );
}

#[test]
fn a_file_without_oom_explains_its_end_state() {
    let v = oom_json(&fixture("scenarios/npu_shaped.pickle"));
    assert_eq!(v["oom"]["found"], false);
    let s = summary_json(&load(&fixture("scenarios/npu_shaped.pickle")), "");
    assert_eq!(v["reserved_bytes"], s["devices"][0]["reserved_bytes"]);
    assert_eq!(v["allocated_bytes"], s["devices"][0]["allocated_bytes"]);
}

/// The text names its holders by when they were held: at the failure only when there was
/// one.
#[test]
fn holders_are_named_at_the_failure_or_at_the_end() {
    for (name, when, not) in [
        (
            "fragmentation_oom",
            "held at the failure",
            "held at the end",
        ),
        ("npu_shaped", "held at the end", "held at the failure"),
    ] {
        let path = fixture(&format!("scenarios/{name}.pickle"));
        let (code, out, err) = run_cli(&["oom", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(out.contains(when) && !out.contains(not), "{name}:\n{out}");
    }
}

/// `segments --json`'s map of the file's first device.
fn segments_json(path: &std::path::Path, at: &str) -> serde_json::Value {
    let v = leakscope_json(&["segments", path.to_str().unwrap(), "--at", at]);
    assert_eq!(v["schema"], "leakscope.segments/3");
    v["devices"][0].clone()
}

/// The segment map at the end is the file's segments (summary's numbers, from CPython);
/// at the OOM it is the state the truth describes.
#[test]
fn segment_map_at_end_and_at_the_oom() {
    let expected = read_json(&root().join("tests/expected/encodings_summary.json"));
    let e = &expected["encodings/tiny_protocol4.pickle"]["devices"][0];
    let v = segments_json(&fixture("encodings/tiny_protocol4.pickle"), "end");
    let t = &v["totals"];
    assert_eq!(t["segments"], e["segments"]);
    assert_eq!(t["reserved_bytes"], e["reserved_bytes"]);
    // The fixture holds a block pending its free: allocated leaves it out, active and
    // requested keep it, as summary (CPython's reading) counts them.
    assert_eq!(t["allocated_bytes"], e["allocated_bytes"]);
    assert_eq!(t["active_bytes"], e["active_bytes"]);
    assert_eq!(t["requested_bytes"], e["requested_bytes"]);
    assert_eq!(
        t["active_bytes"].as_u64().unwrap(),
        t["requested_bytes"].as_u64().unwrap() + t["internal_free_bytes"].as_u64().unwrap()
    );
    assert_eq!(
        t["reserved_bytes"].as_u64().unwrap(),
        t["active_bytes"].as_u64().unwrap() + t["external_free_bytes"].as_u64().unwrap()
    );

    let truth = read_json(&fixture("scenarios/fragmentation_oom.truth.json"));
    let o = &truth["oom"];
    let v = segments_json(&fixture("scenarios/fragmentation_oom.pickle"), "oom");
    assert_eq!(v["totals"]["reserved_bytes"], o["reserved_bytes"]);
    assert_eq!(v["totals"]["allocated_bytes"], o["allocated_bytes"]);
    assert_eq!(v["totals"]["external_free_bytes"], o["cached_free_bytes"]);
    let largest = v["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["largest_free_block_bytes"].as_u64().unwrap())
        .max();
    assert_eq!(largest, o["largest_free_block_bytes"].as_u64());

    let out = Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args([
            "segments",
            fixture("scenarios/fragmentation_oom.pickle")
                .to_str()
                .unwrap(),
            "--at",
            "peak",
        ])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("segments at peak"));
}

/// A file without an `oom` event is answered from its final state: its holders are the
/// generator's bookkeeping of what is live at the end, by site, on every scenario that
/// has no OOM (largest first, ten at most).
#[test]
fn holders_without_an_oom_are_the_truths_end_state() {
    for name in [
        "control_no_leak",
        "late_onset_leak",
        "loss_accum_no_detach",
        "plain_loop_kept_logits",
        "pp_last_stage_recv_pinned",
        "two_devices_recv_leak",
        "wrapped_ring_buffer",
    ] {
        let truth = read_json(&fixture(&format!("scenarios/{name}.truth.json")));
        let v = leakscope_json(&[
            "oom",
            fixture(&format!("scenarios/{name}.pickle"))
                .to_str()
                .unwrap(),
        ]);
        let devices: Vec<serde_json::Value> = match truth["devices"].as_array() {
            Some(d) => d.clone(),
            None => vec![truth.clone()],
        };
        for d in devices {
            let dev = d["device"].as_i64().unwrap_or(0);
            let got = v["devices"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["device"] == dev)
                .unwrap_or_else(|| panic!("{name}: device {dev}"));
            assert_eq!(got["oom"]["found"], false, "{name}");
            let mut want: Vec<(String, u64, u64)> = d["end"]["by_site"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, x)| {
                    (
                        k.clone(),
                        x["bytes"].as_u64().unwrap(),
                        x["blocks"].as_u64().unwrap(),
                    )
                })
                .collect();
            want.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            want.truncate(10);
            let holders: Vec<(String, u64, u64)> = got["top_holders"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| {
                    (
                        h["site"]["label"].as_str().unwrap().to_string(),
                        h["bytes"].as_u64().unwrap(),
                        h["blocks"].as_u64().unwrap(),
                    )
                })
                .collect();
            assert_eq!(holders, want, "{name} device {dev}");
        }
    }
}
