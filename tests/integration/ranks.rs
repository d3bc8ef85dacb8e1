//! `leakscope ranks` over verl-style directories.

use crate::common::*;

fn ranks_json(dir: &std::path::Path) -> serde_json::Value {
    leakscope_json(&["ranks", dir.to_str().unwrap()])
}

/// PP=4, two steps: only rank 3 (the last stage) grows, by the truth's 32 MiB per
/// micro-batch, and only it is flagged; held-at-end per rank and step and rank 3's trend
/// equal the generator's numbers.
#[test]
fn verl_directory_flags_exactly_the_leaking_rank() {
    let dir = fixture("scenarios/verl_ranks");
    let truth = read_json(&dir.join("truth.json"));
    let v = ranks_json(&dir);
    assert_eq!(v["schema"], "leakscope.ranks/3");
    let rows = v["ranks"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    assert_eq!(v["skipped_files"], 1, "truth.json is not a snapshot");
    for r in rows {
        for k in [
            "rank",
            "step",
            "file",
            "peak_requested_bytes",
            "end_allocated_bytes",
            "growth_bytes_per_window",
            "top_suspect",
            "outlier",
            "device",
        ] {
            assert!(r.get(k).is_some(), "{k}");
        }
        let rank = r["rank"].as_u64().unwrap();
        let step = r["step"].as_str().unwrap();
        assert_eq!(r["outlier"], rank == 3, "rank {rank} step {step}");
        let end = &truth["end_allocated_bytes_by_rank_step"][format!("rank{rank}_step{step}")];
        assert_eq!(&r["end_allocated_bytes"], end, "rank {rank} step {step}");
        if rank == 3 {
            assert_eq!(
                r["growth_bytes_per_window"],
                truth["leak"]["bytes_per_micro_batch"]
            );
            // The top suspect is a site object, its label one of the truth's sites.
            let label = r["top_suspect"]["label"].as_str().unwrap();
            assert!(
                truth["leak"]["sites"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s["site"] == label),
                "{label}"
            );
        } else {
            assert_eq!(r["growth_bytes_per_window"], 0);
        }
    }
    let trend = v["trends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["rank"] == 3)
        .unwrap();
    assert_eq!(
        trend["change_bytes"],
        truth["leak"]["end_allocated_growth_step1_to_step2_bytes"]
    );
}

/// Every layout at once, with a memray file and a non-snapshot JSON beside them.
#[test]
fn mixed_directory_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let src = fixture("scenarios/verl_ranks/step1/torch_memory_rank0_pid3120451.pickle");
    let oom = fixture("scenarios/fragmentation_oom.pickle");
    let put = |rel: &str, from: &std::path::Path| {
        let p = d.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::copy(from, p).unwrap();
    };
    put("step3/torch_memory_rank0_pid11.pickle", &src);
    put("steps10-19/torch_memory_rank1_pid12.pickle", &src);
    put(
        "oom_20260101120000/torch_memory_oom_rank0_pid11.pickle",
        &oom,
    );
    put("2026-01-01_12-00-00/torch_memory_rank2_pid13.pickle", &src);
    put("oom_snapshot_4242_20260101120000.pickle", &oom);
    put("rank5_snapshot.pkl", &src);
    std::fs::write(d.join("step3/memray_rank0.bin"), b"MEMRAY\x00garbage").unwrap();
    std::fs::write(d.join("config.json"), b"{\"lr\": 0.001}").unwrap();
    let v = ranks_json(d);
    let rows = v["ranks"].as_array().unwrap();
    let got: Vec<(String, Option<u64>)> = rows
        .iter()
        .map(|r| (r["step"].as_str().unwrap().to_string(), r["rank"].as_u64()))
        .collect();
    // Ordered by step number (a timestamp folder's digits make a large one), OOM dumps last.
    let want: Vec<(String, Option<u64>)> = vec![
        ("".into(), Some(5)),
        ("3".into(), Some(0)),
        ("10-19".into(), Some(1)),
        ("2026-01-01_12-00-00".into(), Some(2)),
        ("oom".into(), None),
        ("oom".into(), Some(0)),
    ];
    assert_eq!(got, want);
    assert_eq!(v["skipped_files"], 2, "the memray file and config.json");
    assert!(rows.iter().all(|r| r["error"].is_null()), "{rows:?}");
}
