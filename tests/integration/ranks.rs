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
    assert_eq!(v["schema"], "leakscope.ranks/5");
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

/// Runs the binary with `args`, killed if it takes longer than `limit`: its exit code,
/// stdout and stderr, or `None` when it had to be killed (a hang fails the test, not the
/// suite).
fn run_within(args: &[&str], limit: std::time::Duration) -> Option<(i32, String, String)> {
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // Drained on threads, so a full pipe never stalls the child.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some((
                status.code().unwrap_or(-1),
                out.join().unwrap(),
                err.join().unwrap(),
            ));
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The devices a shipped scenario records, from its ground truth (a `devices` list, or
/// one `device`): the rows `ranks` gives it.
fn scenario_devices(name: &str) -> usize {
    let truth = read_json(&fixture(&format!("scenarios/{name}.truth.json")));
    truth["devices"].as_array().map_or(1, Vec::len)
}

/// The scenarios a run directory is built from, with where each goes.
const PLACED: [(&str, &str); 2] = [
    ("plain_one_step", "step1/torch_memory_rank0_pid1.pickle"),
    ("fragmentation_oom", "step1/torch_memory_rank1_pid2.pickle"),
];

/// A run directory holding [`PLACED`]; the rows they make.
fn run_dir(d: &std::path::Path) -> usize {
    for (name, rel) in PLACED {
        let p = d.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::copy(fixture(&format!("scenarios/{name}.pickle")), p).unwrap();
    }
    PLACED.iter().map(|(n, _)| scenario_devices(n)).sum()
}

#[cfg(unix)]
fn mkfifo(p: &std::path::Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a plain mkfifo on a path in our temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A `loop -> ..` symlink, a `latest -> step1` one and a link to a folder outside the run:
/// each directory is walked once (by device and inode), so every file counts once, and a
/// folder reached only through a link is read.
#[cfg(unix)]
#[test]
fn symlinked_directories_are_walked_once() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("run");
    let mut rows = run_dir(&d);
    std::os::unix::fs::symlink("..", d.join("step1/loop")).unwrap();
    std::os::unix::fs::symlink("step1", d.join("latest")).unwrap();
    let v = ranks_json(&d);
    assert_eq!(v["ranks"].as_array().unwrap().len(), rows, "{v}");
    // A folder outside the run, reached only through a link (and a second link to it).
    let outside = tmp.path().join("elsewhere/step2");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::copy(
        fixture("scenarios/plain_one_step.pickle"),
        outside.join("torch_memory_rank0_pid3.pickle"),
    )
    .unwrap();
    rows += scenario_devices("plain_one_step");
    std::os::unix::fs::symlink(&outside, d.join("step2")).unwrap();
    std::os::unix::fs::symlink(&outside, d.join("step1/again")).unwrap();
    let v = ranks_json(&d);
    let got = v["ranks"].as_array().unwrap();
    assert_eq!(got.len(), rows, "{v}");
    let files: std::collections::HashSet<&str> =
        got.iter().map(|r| r["file"].as_str().unwrap()).collect();
    assert_eq!(files.len(), PLACED.len() + 1, "{v}");
    // The shallower link names the outside folder.
    assert!(
        got.iter()
            .any(|r| r["step"] == "2" && r["file"].as_str().unwrap().contains("run/step2/")),
        "{v}"
    );
    assert_eq!(v["skipped_files"], 0);
    assert_eq!(v["special_files"], serde_json::json!([]));

    // `export --parquet` walks the same way: one `ranks` row per file and device.
    let out = tmp.path().join("tables");
    let e = leakscope_json(&[
        "export",
        d.to_str().unwrap(),
        "--parquet",
        out.to_str().unwrap(),
    ]);
    assert_eq!(e["files_read"], PLACED.len() + 1, "{e}");
    let ranks = e["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "ranks")
        .unwrap();
    assert_eq!(ranks["rows"], rows, "{e}");
}

/// FIFOs in a run directory, one named like a snapshot, and a socket: never opened (a
/// FIFO would wait for a writer), listed with their kind, and named in a warning line.
#[cfg(unix)]
#[test]
fn fifos_and_sockets_in_a_run_are_skipped_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("run");
    let rows = run_dir(&d);
    let fifos = [
        d.join("step1/torch_memory_rank2_pid3.pickle"),
        d.join("pipe"),
    ];
    for f in &fifos {
        mkfifo(f);
    }
    let sock = d.join("step1/s.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let limit = std::time::Duration::from_secs(2);
    let dir = d.to_str().unwrap();

    let (code, out, err) = run_within(&["ranks", dir, "--json"], limit)
        .expect("ranks finishes within 2 s with FIFOs in the directory");
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ranks"].as_array().unwrap().len(), rows, "{v}");
    assert_eq!(v["skipped_files"], 0, "{v}");
    let special = v["special_files"].as_array().unwrap();
    assert_eq!(special.len(), fifos.len() + 1, "{v}");
    for f in &fifos {
        assert!(
            special
                .iter()
                .any(|s| s["file"] == f.to_str().unwrap() && s["kind"] == "fifo"),
            "{}: {v}",
            f.display()
        );
    }
    assert!(
        special
            .iter()
            .any(|s| s["file"] == sock.to_str().unwrap() && s["kind"] == "socket"),
        "{v}"
    );

    let (code, out, err) = run_within(&["ranks", dir], limit).expect("ranks finishes within 2 s");
    assert_eq!(code, 0, "{err}");
    let warning = format!(
        "warning: {} special files skipped, never opened",
        fifos.len() + 1
    );
    assert!(out.contains(&warning), "{out}");

    // `export --parquet` lists the same directory the same way.
    let tables = tmp.path().join("tables");
    let (code, out, err) = run_within(
        &[
            "export",
            dir,
            "--parquet",
            tables.to_str().unwrap(),
            "--json",
        ],
        std::time::Duration::from_secs(20),
    )
    .expect("export finishes with FIFOs in the directory");
    assert_eq!(code, 0, "{err}");
    let e: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(e["files_read"], PLACED.len(), "{e}");
    assert_eq!(
        e["special_files"].as_array().unwrap().len(),
        fifos.len() + 1
    );
    let (code, out, err) = run_within(
        &["export", dir, "--parquet", tables.to_str().unwrap()],
        std::time::Duration::from_secs(20),
    )
    .expect("export finishes with FIFOs in the directory");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&warning), "{out}");
}

/// A folder of snapshots without a run's layout (no step folders, no ranks in the names):
/// one row per file with its path, no step, nobody's peer (no outlier among unrelated
/// files), no trend and no series drawn through them; the text names each file.
#[test]
fn a_folder_without_a_run_layout_is_a_row_per_file() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir(d.join("cuda")).unwrap();
    let names = [
        "control_no_leak",
        "loss_accum_no_detach",
        "plain_loop_control",
        "plain_loop_kept_logits",
    ];
    for n in names {
        std::fs::copy(
            fixture(&format!("scenarios/{n}.pickle")),
            d.join("cuda").join(format!("{n}.pickle")),
        )
        .unwrap();
    }
    let v = ranks_json(d);
    let rows = v["ranks"].as_array().unwrap();
    let mut files: Vec<String> = rows
        .iter()
        .map(|r| r["file"].as_str().unwrap().to_string())
        .collect();
    files.sort();
    files.dedup();
    assert_eq!(files.len(), names.len());
    assert!(rows.iter().all(|r| r["step"] == "" && r["rank"].is_null()));
    assert!(rows.iter().all(|r| r["outlier"] == false), "{rows:?}");
    assert_eq!(v["trends"].as_array().unwrap().len(), 0);
    assert_eq!(v["series"].as_array().unwrap().len(), 0);
    let (code, text, err) = run_cli(&["ranks", d.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for n in names {
        assert!(text.contains(&format!("cuda/{n}.pickle")), "{text}");
    }
    assert!(
        !text.contains("allocated at the end of each step"),
        "{text}"
    );
    assert!(!text.contains("OUTLIER"), "{text}");
}

/// A file's failure has a kind besides its words: a snapshot cut in half is `truncated`,
/// one whose first bytes are no format is `not_a_snapshot` and is skipped as such (never
/// by matching its message).
#[test]
fn failures_carry_their_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("step1");
    std::fs::create_dir(&d).unwrap();
    let src = fixture("scenarios/verl_ranks/step1/torch_memory_rank0_pid3120451.pickle");
    let bytes = std::fs::read(&src).unwrap();
    std::fs::write(d.join("rank0.pickle"), &bytes).unwrap();
    std::fs::write(d.join("rank1.pickle"), &bytes[..bytes.len() / 2]).unwrap();
    std::fs::write(d.join("rank2.pickle"), b"hello, not a pickle").unwrap();
    let v = ranks_json(tmp.path());
    let rows = v["ranks"].as_array().unwrap();
    let kind = |rank: u64| {
        rows.iter()
            .find(|r| r["rank"] == rank)
            .map(|r| r["error_kind"].clone())
    };
    assert_eq!(kind(0), Some(serde_json::Value::Null));
    assert_eq!(kind(1), Some(serde_json::json!("truncated")));
    assert_eq!(kind(2), None, "not a snapshot: skipped");
    assert_eq!(v["skipped_files"], 1);
}

/// A run of four pipeline stages times two replicas whose last stage keeps each
/// micro-batch's graph, recorded as `context="alloc"` records frees (each with its
/// allocation's stack): the last stage's ranks and no others are flagged, each with the
/// receive buffer as its top suspect at 16 MiB per micro-batch (the generator's buffer
/// size), and `leaks` on one of their files calls it retained.
#[test]
fn a_stage_that_keeps_its_graph_is_flagged_whatever_the_free_stacks() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    for mode in ["alloc", "own", "none"] {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("python3")
            .arg(root().join("fixtures/gen/sweep.py"))
            .args(["--out", dir.path().to_str().unwrap(), "--run-dir", "4", "2"])
            .args(["--free-stacks", mode])
            .output()
            .expect("python3 runs");
        assert!(out.status.success());
        let last: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(last, [3, 7]);
        let v = ranks_json(dir.path());
        let rows = v["ranks"].as_array().unwrap();
        assert_eq!(rows.len(), 8);
        for r in rows {
            let rank = r["rank"].as_u64().unwrap();
            let keeps = last.contains(&rank);
            assert_eq!(r["outlier"], keeps, "{mode}: rank {rank}");
            if keeps {
                let label = r["top_suspect"]["label"].as_str().unwrap();
                assert!(
                    label.ends_with(":create_tensor_recv_prev"),
                    "{mode}: {label}"
                );
                assert_eq!(r["top_suspect_bytes_per_window"], 16 << 20, "{mode}");
            } else {
                assert_eq!(r["growth_bytes_per_window"], 0, "{mode}: rank {rank}");
            }
        }
        let file = dir.path().join("step1/rollout_rank3_pid4003.pickle");
        let leaks = leakscope_json(&["leaks", file.to_str().unwrap()]);
        let suspect = leaks["devices"][0]["suspects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["site"]["label"]
                    .as_str()
                    .unwrap()
                    .ends_with(":create_tensor_recv_prev")
            })
            .expect("the receive buffer is a suspect");
        assert_eq!(suspect["kind"], "retained", "{mode}");
    }
}
