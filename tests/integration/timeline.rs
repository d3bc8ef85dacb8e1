//! `leakscope timeline`: drawn plus summarized bytes are the requested bytes CPython's
//! bookkeeping gives after every event (tests/expected/timeline_check.py), and the
//! allocations drawn one by one are the largest by bytes x lifetime.

use std::path::PathBuf;

use crate::common::{fixture, have_python, leakscope_json};

fn scenario_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![fixture("scenarios")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("scenarios") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "pickle") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 30, "{} scenario files", files.len());
    files
}

/// Every event of every shipped scenario, with none, some and all allocations drawn.
#[test]
fn drawn_plus_summarized_is_cpythons_requested_after_every_event() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    let files = scenario_files();
    for max in ["0", "50", "1000000"] {
        let out = std::process::Command::new("python3")
            .arg(crate::common::root().join("tests/expected/timeline_check.py"))
            .arg(env!("CARGO_BIN_EXE_leakscope"))
            .args(["--max-allocations", max])
            .args(&files)
            .output()
            .expect("python3 runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "--max-allocations {max}:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.lines().count() >= files.len(), "{text}");
    }
}

/// The drawn allocations are the N largest by bytes x lifetime of all of them.
#[test]
fn the_largest_by_bytes_times_lifetime_are_drawn() {
    let file = fixture("scenarios/plain_loop_kept_logits.pickle");
    let path = file.to_str().unwrap();
    let all = leakscope_json(&["timeline", path, "--max-allocations", "1000000"]);
    let some = leakscope_json(&["timeline", path, "--max-allocations", "40"]);
    for (a, s) in all["devices"]
        .as_array()
        .unwrap()
        .iter()
        .zip(some["devices"].as_array().unwrap())
    {
        let n = a["events"].as_u64().unwrap();
        let weight = |b: &serde_json::Value| {
            let first = b["first_event"].as_u64().unwrap_or(0);
            let last = b["free_event"].as_u64().unwrap_or(n);
            u128::from(b["bytes"].as_u64().unwrap()) * u128::from((last - first).max(1))
        };
        let mut weights: Vec<u128> = a["allocations"]
            .as_array()
            .unwrap()
            .iter()
            .map(weight)
            .collect();
        assert_eq!(
            weights.len() as u64,
            a["allocations_total"].as_u64().unwrap()
        );
        assert_eq!(a["summarized"]["allocations"], 0);
        weights.sort_unstable_by(|x, y| y.cmp(x));
        let drawn = s["allocations"].as_array().unwrap();
        assert_eq!(drawn.len(), 40.min(weights.len()));
        assert_eq!(
            s["summarized"]["allocations"].as_u64().unwrap() as usize,
            weights.len() - drawn.len()
        );
        let mut got: Vec<u128> = drawn.iter().map(weight).collect();
        got.sort_unstable_by(|x, y| y.cmp(x));
        assert_eq!(got, weights[..drawn.len()].to_vec());
        // Stacked as memory_viz stacks them: held from the start first, then by birth.
        let births: Vec<u64> = drawn
            .iter()
            .map(|b| b["first_event"].as_u64().map_or(0, |e| e + 1))
            .collect();
        assert!(births.windows(2).all(|w| w[0] <= w[1]), "{births:?}");
        // Every drawn allocation's stack resolves to frames.
        let stacks = s["stacks"].as_array().unwrap();
        let frames = s["frames"].as_array().unwrap();
        for b in drawn {
            if let Some(k) = b["stack"].as_u64() {
                for f in stacks[k as usize].as_array().unwrap() {
                    assert!(frames[f.as_u64().unwrap() as usize]["label"].is_string());
                }
            }
        }
    }
}
