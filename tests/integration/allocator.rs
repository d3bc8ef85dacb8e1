//! Allocator-aware diagnosis (issue 38): memory pools, reserved growth, memory held until
//! garbage collection, and OOM advice that reads the allocator settings. Expected numbers
//! come from the generator's model (`fixtures/scenarios/*.truth.json`) and, for the real
//! corpus, from CPython's `pickle`.

use serde_json::Value;

use crate::common::*;

fn scenario(stem: &str) -> String {
    fixture(&format!("scenarios/{stem}.pickle"))
        .to_string_lossy()
        .into_owned()
}

/// A device's truth field, else the file's (single-device files hold it at the top).
fn field<'t>(file: &'t Value, dev: &'t Value, key: &str) -> &'t Value {
    match dev.get(key) {
        Some(v) => v,
        None => &file[key],
    }
}

#[test]
fn pools_match_ground_truth_in_every_scenario() {
    let mut checked = 0;
    for (stem, file_truth) in scenario_truths() {
        let Some(_) = device_truths(&file_truth).first() else {
            continue;
        };
        let summary = leakscope_json(&["summary", &scenario(&stem)]);
        for (dev, truth) in device_truths(&file_truth) {
            let Some(expected) = field(&file_truth, &truth, "pools").as_array() else {
                continue;
            };
            let got = device_of(&summary, dev, &stem)["pools"]
                .as_array()
                .expect("pools")
                .clone();
            assert_eq!(got.len(), expected.len(), "{stem} device {dev}: pool count");
            for (g, e) in got.iter().zip(expected) {
                for f in [
                    "pool_id",
                    "private",
                    "reserved_bytes",
                    "allocated_bytes",
                    "requested_bytes",
                    "segments",
                ] {
                    assert_eq!(g[f], e[f], "{stem} device {dev}: pool {} {f}", e["pool_id"]);
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "pools checked on {checked} devices");
}

#[test]
fn graph_pool_is_named_and_grouped_apart() {
    let truth = read_json(&fixture("scenarios/cuda_graph_pool.truth.json"));
    let private = &truth["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["private"] == true)
        .expect("the graph's pool")
        .clone();
    // `top --by pool` at the end: the live bytes of each pool are its blocks' requests.
    let top = leakscope_json(&["top", &scenario("cuda_graph_pool"), "--by", "pool"]);
    let rows = top["devices"][0]["rows"].as_array().expect("rows");
    let row = rows
        .iter()
        .find(|r| r["site"]["label"] == "private pool (0, 1)")
        .expect("a row for the private pool");
    assert_eq!(row["bytes"], private["requested_bytes"]);
    let total: u64 = rows.iter().map(|r| r["bytes"].as_u64().unwrap()).sum();
    let site = leakscope_json(&["top", &scenario("cuda_graph_pool")]);
    let by_site: u64 = site["devices"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(total, by_site, "the pools split what the sites hold");
    // The segment map marks the private pool's segments, and its pools add up.
    let seg = leakscope_json(&["segments", &scenario("cuda_graph_pool")]);
    let d = &seg["devices"][0];
    let in_private: u64 = d["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["pool_id"] == serde_json::json!([0, 1]))
        .map(|s| s["total_size"].as_u64().unwrap())
        .sum();
    assert_eq!(in_private, private["reserved_bytes"].as_u64().unwrap());
    for cmd in ["summary", "segments"] {
        let (_, text, _) = run_cli(&[cmd, &scenario("cuda_graph_pool")]);
        assert!(text.contains("(0, 1) private"), "{cmd}: {text}");
        assert!(text.contains("created at"), "{cmd}: {text}");
    }
    // The report names the private pool beside the totals.
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("r.html");
    let (code, _, err) = run_cli(&[
        "report",
        &scenario("cuda_graph_pool"),
        "-o",
        &page.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    let card = format!(
        "id=\"card-pools-0\" data-bytes=\"{}\"",
        private["reserved_bytes"]
    );
    assert!(html.contains(&card), "the report's pool card");
}

/// Each device of every single-file scenario whose truth has `key`, as `(name, the
/// device's `leaks --json` entry (windows: the truth's annotations where it has them),
/// its finding, the truth's)`; where the truth's is null, the finding must be null too,
/// checked here.
fn findings_against_truth(key: &str) -> Vec<(String, Value, Value, Value)> {
    let mut found = Vec::new();
    for (stem, file_truth) in scenario_truths() {
        if file_truth.get("files").is_some() || stem.starts_with("series_") {
            continue; // rank folders and series are read per file elsewhere
        }
        // The truth's windows where the file names them (annotations), else leakscope's.
        let spec = match file_truth["windows"]["annotation_regex"].as_str() {
            Some(re) if file_truth["windows"]["kind"] == "annotation" => {
                format!("annotation:{re}")
            }
            _ => "auto".to_string(),
        };
        let leaks = leakscope_json(&["leaks", &scenario(&stem), "--windows", &spec]);
        for (dev, truth) in device_truths(&file_truth) {
            let d = device_of(&leaks, dev, &stem).clone();
            let got = d[key].clone();
            let want = field(&file_truth, &truth, key).clone();
            if want.is_null() {
                assert!(got.is_null(), "{stem} device {dev}: no {key}, got {got}");
                continue;
            }
            found.push((stem.clone(), d, got, want));
        }
    }
    found
}

#[test]
fn reserved_growth_matches_ground_truth_in_every_scenario() {
    let found = findings_against_truth("reserved_growth");
    assert_eq!(
        found.len(),
        2,
        "two scenarios grow their cache (every window, every third)"
    );
    for (stem, d, got, want) in &found {
        let rate = got["bytes_per_window"].as_f64().unwrap();
        let expected = want["bytes_per_window"].as_f64().unwrap();
        assert!(
            (rate - expected).abs() <= 0.1 * expected,
            "{stem}: {rate} per window, truth {expected}"
        );
        for f in ["windows_growing", "onset_window", "cause", "period_windows"] {
            assert_eq!(got[f], want[f], "{stem}: {f}");
        }
        let occurrence = got["bytes_per_occurrence"].as_f64().unwrap();
        let expected = want["bytes_per_occurrence"].as_f64().unwrap();
        assert!(
            (occurrence - expected).abs() <= 0.1 * expected,
            "{stem}: {occurrence} per growing window, truth {expected}"
        );
        let mut streams: Vec<i64> = got["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["stream"].as_i64().unwrap())
            .collect();
        let mut truth_streams: Vec<i64> = want["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_i64().unwrap())
            .collect();
        streams.sort_unstable();
        truth_streams.sort_unstable();
        assert_eq!(streams, truth_streams, "{stem}: the abandoned streams");
        assert!(
            d["suspects"].as_array().unwrap().is_empty(),
            "{stem}: reserved growth is no leak suspect"
        );
    }
}

#[test]
fn gc_held_matches_ground_truth_in_every_scenario() {
    let found = findings_against_truth("gc_held");
    assert_eq!(found.len(), 1, "one scenario holds memory until gc");
    for (stem, d, got, want) in &found {
        for f in [
            "collections",
            "event_indices",
            "bytes_per_collection",
            "period_windows",
        ] {
            assert_eq!(got[f], want[f], "{stem}: {f}");
        }
        let windows: Vec<Value> = got["windows"].as_array().unwrap().to_vec();
        assert_eq!(Value::Array(windows), want["windows"], "{stem}: windows");
        for (site, bytes) in want["sites"].as_object().unwrap() {
            let row = got["sites"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["site"]["label"] == *site)
                .unwrap_or_else(|| panic!("{stem}: no gc-held site {site}"));
            assert_eq!(&row["bytes"], bytes, "{stem}: {site}");
        }
        assert!(
            d["suspects"].as_array().unwrap().is_empty(),
            "{stem}: not a leak"
        );
        let kinds: Vec<&Value> = d["not_suspects"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| {
                want["sites"]
                    .get(g["site"]["label"].as_str().unwrap())
                    .is_some()
            })
            .map(|g| &g["kind"])
            .collect();
        assert!(
            !kinds.is_empty() && kinds.iter().all(|k| *k == "gc-held"),
            "{stem}: the collected site is gc-held: {kinds:?}"
        );
    }
}

#[test]
fn fragmentation_advice_with_expandable_segments_on_reads_the_setting() {
    let truth = read_json(&fixture(
        "scenarios/expandable_fragmentation_oom.truth.json",
    ));
    let t = &truth["oom"];
    let oom = leakscope_json(&["oom", &scenario("expandable_fragmentation_oom")]);
    let d = &oom["devices"][0];
    for (ours, theirs) in [
        ("reserved_bytes", "reserved_bytes"),
        ("allocated_bytes", "allocated_bytes"),
        ("cached_free_bytes", "cached_free_bytes"),
        ("cached_free_in_pool_bytes", "cached_free_bytes_in_pool"),
        ("largest_free_block_bytes", "largest_free_block_bytes"),
        ("would_fit_if_contiguous", "would_fit_if_contiguous"),
    ] {
        assert_eq!(d[ours], t[theirs], "{ours}");
    }
    assert_eq!(d["oom"]["request_bytes"], t["requested_bytes"]);
    let advice = d["advice"].as_array().unwrap();
    let frag = advice
        .iter()
        .find(|a| a["kind"] == "fragmentation")
        .expect("fragmentation advice");
    assert_eq!(frag["settings"]["expandable_segments"], true);
    assert_eq!(
        frag["settings"]["conf"],
        t["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"]
    );
    assert!(
        !frag["pinning"].as_array().unwrap().is_empty(),
        "the blocks pinning the free space are named"
    );
    let (_, text, _) = run_cli(&["oom", &scenario("expandable_fragmentation_oom")]);
    assert!(text.contains("expandable_segments on"), "{text}");
    assert!(text.contains("already on"), "{text}");
    assert!(
        !text.contains("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        "never advise what is set: {text}"
    );
    // Off (the other fragmentation scenario): the advice is to turn them on.
    let (_, text, _) = run_cli(&["oom", &scenario("fragmentation_oom")]);
    assert!(text.contains("expandable_segments off"), "{text}");
    assert!(
        text.contains("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        "{text}"
    );
}

#[test]
fn reserved_growth_budget_fails_the_growing_cache_only() {
    let dir = tempfile::tempdir().unwrap();
    let budget = dir.path().join("budget.toml");
    std::fs::write(
        &budget,
        "[growth]\nmax_reserved_bytes_per_window = \"16 MiB\"\n",
    )
    .unwrap();
    let b = budget.to_string_lossy();
    let (code, text, _) = run_cli(&["check", &scenario("stream_per_call"), "--budget", &b]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("growth.max_reserved_bytes_per_window: 64.0 MiB"),
        "{text}"
    );
    // Under micro-batch windows, growth every third window is a rate per window:
    // 64 MiB / 3 = 21.3 MiB, over 16 MiB.
    let step = scenario("stream_per_step");
    let args = [
        "check",
        step.as_str(),
        "--budget",
        &*b,
        "--windows",
        r"annotation:^call\d+$",
    ];
    let (code, text, _) = run_cli(&args);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("growth.max_reserved_bytes_per_window: 21.3 MiB"),
        "{text}"
    );
    let (code, text, _) = run_cli(&["check", &scenario("cuda_graph_pool"), "--budget", &b]);
    assert_eq!(code, 0, "{text}");
}

#[test]
fn corpus_pools_add_up_to_reserved() {
    let Some(corpus) = corpus("corpus_pools_add_up_to_reserved") else {
        return;
    };
    let files = corpus_snapshots(&corpus);
    assert_eq!(files.len(), 18, "the real corpus");
    for path in &files {
        let p = path.to_string_lossy();
        let s = leakscope_json(&["summary", &p]);
        for d in s["devices"].as_array().unwrap() {
            let pools = d["pools"].as_array().unwrap();
            for (sum, total) in [
                ("reserved_bytes", "reserved_bytes"),
                ("allocated_bytes", "allocated_bytes"),
                ("segments", "segments"),
            ] {
                let got: u64 = pools.iter().map(|x| x[sum].as_u64().unwrap()).sum();
                assert_eq!(
                    got,
                    d[total].as_u64().unwrap(),
                    "{p} device {}: {sum}",
                    d["device"]
                );
            }
        }
    }
}

/// The settings every explanation reads equal what CPython reads from the file, on every
/// corpus file (the OOM explanation of a file without an `oom` event explains its end
/// state, with the same settings); each advice carries them.
#[test]
fn corpus_oom_advice_states_the_recorded_settings() {
    let Some(corpus) = corpus("corpus_oom_advice_states_the_recorded_settings") else {
        return;
    };
    let (mut advised, mut recorded_files) = (0, 0);
    for path in corpus_snapshots(&corpus) {
        let p = path.to_string_lossy();
        let oom = leakscope_json(&["oom", &p]);
        let recorded = cpython_settings(&path);
        recorded_files += usize::from(!recorded.as_object().unwrap().is_empty());
        let expandable = recorded["expandable_segments"].as_bool().or_else(|| {
            recorded["PYTORCH_CUDA_ALLOC_CONF"]
                .as_str()
                .filter(|c| c.contains("expandable_segments"))
                .map(|c| c.contains("expandable_segments:True"))
        });
        let conf = recorded["PYTORCH_CUDA_ALLOC_CONF"]
            .as_str()
            .or(recorded["PYTORCH_NPU_ALLOC_CONF"].as_str())
            .filter(|c| !c.trim().is_empty());
        let split = recorded["max_split_size"].as_i64().filter(|&b| b > 0);
        for d in oom["devices"].as_array().unwrap() {
            let s = &d["allocator_settings"];
            assert_eq!(s["expandable_segments"].as_bool(), expandable, "{p}");
            assert_eq!(s["conf"].as_str(), conf, "{p}");
            assert_eq!(s["max_split_size_bytes"].as_i64(), split, "{p}");
            for a in d["advice"].as_array().unwrap() {
                assert_eq!(&a["settings"], s, "{p}: each advice states what it read");
                advised += 1;
            }
            if d["oom"]["found"] == true && !d["advice"].as_array().unwrap().is_empty() {
                let (_, text, _) = run_cli(&["oom", &p]);
                assert!(
                    text.contains("allocator settings read: expandable_segments"),
                    "{p}: {text}"
                );
            }
        }
    }
    assert!(advised > 0, "some corpus OOM gets advice");
    assert!(
        recorded_files >= 5,
        "{recorded_files} corpus files record allocator_settings"
    );
}

/// The file's `allocator_settings` (an empty object when it has none), as CPython reads it.
fn cpython_settings(path: &std::path::Path) -> Value {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import json,pickle,sys\n\
             d=pickle.load(open(sys.argv[1],'rb'))\n\
             s=d.get('allocator_settings', {}) if isinstance(d, dict) else {}\n\
             json.dump({k: v for k, v in s.items() if isinstance(v, (bool, int, float, str))}, sys.stdout)",
        ])
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("python wrote JSON")
}
