//! `leakscope check`: exit codes on passing, failing and malformed input, baselines, and
//! JUnit output. This is how the project gates its own fixture snapshots.

use std::process::Command;

use crate::common::*;

fn check(files: &[&str], budget: &str, extra: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path().join("budget.toml");
    std::fs::write(&b, budget).unwrap();
    let mut args: Vec<String> = vec!["check".into()];
    args.extend(files.iter().map(|f| fixture(f).display().to_string()));
    args.extend(["--budget".to_string(), b.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    run_cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

const BUDGET: &str = r#"
[leaks]
max_bytes_per_window = "1 MiB"
"#;

#[test]
fn the_control_passes_and_each_leak_fails_naming_site_and_rate() {
    let (code, out, err) = check(&["scenarios/control_no_leak.pickle"], BUDGET, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("within budget"), "{out}");

    // Each leaking scenario, with the site and rate its truth names (above 1 MiB/window).
    for (file, site, rate) in [
        (
            "pp_last_stage_recv_pinned",
            "p2p_communication.py:331:create_tensor_recv_prev",
            16_777_216u64,
        ),
        ("loss_accum_no_detach", "linear.py:134:forward", 155_582_464),
        ("wrapped_ring_buffer", "linear.py:134:forward", 155_582_464),
        ("fragmentation_oom", "linear.py:134:forward", 24_708_277),
    ] {
        let (code, out, _) = check(&[&format!("scenarios/{file}.pickle")], BUDGET, &["--json"]);
        assert_eq!(code, 1, "{file}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["schema"], "leakscope.check/5");
        let c = &v["files"][0]["devices"][0]["cases"][0];
        assert_eq!(c["name"], "leaks.max_bytes_per_window");
        assert_eq!(c["passed"], false);
        assert_eq!(c["value"], rate, "{file}");
        assert!(
            c["site"]["label"].as_str().unwrap().ends_with(site),
            "{file}: {}",
            c["site"]
        );
        assert!(
            !c["stack"].as_array().unwrap().is_empty(),
            "{file}: the stack"
        );
    }
    // The NPU file's leak is 8 KiB per window: under this budget, caught by a tighter one.
    let (code, _, _) = check(&["scenarios/npu_shaped.pickle"], BUDGET, &[]);
    assert_eq!(code, 0);
    let (code, out, _) = check(
        &["scenarios/npu_shaped.pickle"],
        "[leaks]\nmax_bytes_per_window = 4096\n",
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "torch_functional.py:129:logprobs_from_logits_flash_attn grows by 8.00 KiB per window"
        ),
        "{out}"
    );
}

/// A growth limit on one iteration cannot be judged: the case fails and says why (a gate
/// that cannot see growth must not pass it), while memory limits are still checked.
#[test]
fn growth_limits_fail_where_the_trace_gives_no_verdicts() {
    let budget = "[leaks]\nmax_bytes_per_window = \"1 GiB\"\nforbidden_sites = [\"nowhere\"]\n\
                  [memory]\npeak_requested = \"100 GiB\"\n";
    let (code, out, _) = check(&["scenarios/plain_one_step.pickle"], budget, &["--json"]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cases = v["files"][0]["devices"][0]["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "leaks.max_bytes_per_window",
            "leaks.forbidden_sites[nowhere]",
            "memory.peak_requested"
        ]
    );
    for c in &cases[..2] {
        assert_eq!(c["passed"], false);
        assert!(
            c["unjudged"].as_str().unwrap().contains("frees most"),
            "{c}"
        );
    }
    assert_eq!(cases[2]["passed"], true);
    assert!(cases[2]["unjudged"].is_null());
    let (_, text, _) = check(&["scenarios/plain_one_step.pickle"], budget, &[]);
    assert!(
        text.contains("cannot be checked: no per-window verdicts"),
        "{text}"
    );
    // Not judged is not FAIL beside a number: the two growth limits say so, the memory
    // limit is met.
    assert!(
        text.contains("leaks.max_bytes_per_window: not judged (limit 1.00 GiB)"),
        "{text}"
    );
    assert!(!text.contains("FAIL"), "{text}");
    assert!(text.contains("2 limit(s) could not be judged"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("junit.xml");
    check(
        &["scenarios/plain_one_step.pickle"],
        budget,
        &["--junit", j.to_str().unwrap()],
    );
    let xml = std::fs::read_to_string(&j).unwrap();
    assert!(xml.contains("not checked: no per-window verdicts"), "{xml}");
}

/// One window asked for is no unit of work either: a growth limit on it is not judged
/// (before, `every:N` covering the whole trace passed any limit, even 0 B).
#[test]
fn one_window_asked_for_is_not_judged() {
    let budget = "[leaks]\nmax_bytes_per_window = 0\n[windows]\nspec = \"every:1000000000\"\n";
    let (code, out, _) = check(
        &["scenarios/loss_accum_no_detach.pickle"],
        budget,
        &["--json"],
    );
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = &v["files"][0]["devices"][0]["cases"][0];
    assert_eq!(c["passed"], false, "{c}");
    assert!(
        c["unjudged"].as_str().unwrap().contains("at least two"),
        "{c}"
    );
}

#[test]
fn forbidden_sites_memory_limits_and_site_limits() {
    let budget = r#"
[leaks]
forbidden_sites = ["create_tensor_recv_prev"]
[memory]
end_reserved = "100 GiB"
[[sites]]
pattern = "adam\\.py"
max_end_bytes = "100 MiB"
"#;
    let (code, out, _) = check(&["scenarios/pp_last_stage_recv_pinned.pickle"], budget, &[]);
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL leaks.forbidden_sites[create_tensor_recv_prev]"),
        "{out}"
    );
    // Adam's state: 288 MiB live at the end (the truth's end.by_site), over 100 MiB.
    assert!(
        out.contains("FAIL sites[adam\\.py].max_end_bytes: 288 MiB"),
        "{out}"
    );
    assert!(out.contains("ok   memory.end_reserved"), "{out}");
}

#[test]
fn a_baseline_regression_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = check(
        &["scenarios/pp_last_stage_forward_only.pickle"],
        "[leaks]\nmax_bytes_per_window = \"1 GiB\"\n",
        &["--json"],
    );
    assert_eq!(code, 0);
    let base = dir.path().join("base.json");
    std::fs::write(&base, out).unwrap();
    let budget = "[leaks]\nmax_bytes_per_window = \"1 GiB\"\n[baseline]\ntolerance = \"10%\"\n";
    // The same run against itself is within the baseline ...
    let (code, out, _) = check(
        &["scenarios/pp_last_stage_forward_only.pickle"],
        budget,
        &["--baseline", base.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    // ... the training run, which also keeps the receive buffer, is a regression.
    let (code, out, _) = check(
        &["scenarios/pp_last_stage_recv_pinned.pickle"],
        budget,
        &["--baseline", base.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL baseline.max_bytes_per_window"), "{out}");
}

#[test]
fn malformed_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.pickle");
    let data = std::fs::read(fixture("encodings/tiny_protocol4.pickle")).unwrap();
    std::fs::write(&bad, &data[..500]).unwrap();
    let b = dir.path().join("b.toml");
    std::fs::write(&b, BUDGET).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args([
            "check",
            bad.to_str().unwrap(),
            "--budget",
            b.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    for budget in [
        "[leaks]\nmax_bytes_per_window = \"lots\"\n",
        "[leak]\n",
        "[[sites]]\npattern = \"(\"\n",
    ] {
        let (code, _, err) = check(&["scenarios/control_no_leak.pickle"], budget, &[]);
        assert_eq!(code, 2, "{budget}: {err}");
        assert!(err.contains("budget"), "{err}");
    }
}

#[test]
fn junit_output_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("junit.xml");
    let budget = r#"
[leaks]
max_bytes_per_window = "1 MiB"
[memory]
peak_requested = "40 GiB"
"#;
    let (code, _, _) = check(
        &[
            "scenarios/control_no_leak.pickle",
            "scenarios/loss_accum_no_detach.pickle",
        ],
        budget,
        &["--junit", j.to_str().unwrap()],
    );
    assert_eq!(code, 1);
    let xml = std::fs::read_to_string(&j).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    let suites: Vec<_> = root
        .children()
        .filter(|n| n.has_tag_name("testsuite"))
        .collect();
    assert_eq!(suites.len(), 2);
    for s in &suites {
        let cases: Vec<_> = s
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        let failures = cases
            .iter()
            .filter(|c| c.children().any(|x| x.has_tag_name("failure")))
            .count();
        assert_eq!(s.attribute("tests").unwrap(), cases.len().to_string());
        assert_eq!(s.attribute("failures").unwrap(), failures.to_string());
        assert!(
            cases
                .iter()
                .all(|c| c.attribute("name").is_some() && c.attribute("classname").is_some())
        );
    }
    assert_eq!(suites[0].attribute("failures"), Some("0"));
    assert_eq!(suites[1].attribute("failures"), Some("1"));
    // The failure message gives sizes as the text does, not raw bytes.
    let failure = suites[1]
        .descendants()
        .find(|n| n.has_tag_name("failure"))
        .unwrap();
    let message = failure.attribute("message").unwrap();
    assert!(message.ends_with(" exceeds 1.00 MiB"), "{message}");
}

/// The documented example budget parses, with every limit as the hand-computed bytes.
#[test]
fn the_example_budget_parses() {
    use leakscope::budget::{Budget, parse_size};
    let text = std::fs::read_to_string(root().join("docs/leakscope.toml")).unwrap();
    Budget::parse(&text).expect("docs/leakscope.toml parses");
    assert_eq!(parse_size("1.5 MiB").unwrap(), 1_572_864);
    assert_eq!(parse_size("3 GB").unwrap(), 3_000_000_000);
    assert_eq!(parse_size("512").unwrap(), 512);
}

/// Every limit that cannot be read is an error naming it, never a limit skipped (which
/// would pass any snapshot).
#[test]
fn a_limit_that_cannot_be_read_is_an_error() {
    use leakscope::budget::{Budget, Tolerance};
    for (text, field) in [
        (
            "[memory]\npeak_requested = \"2 gallons\"\n",
            "memory.peak_requested",
        ),
        (
            "[memory]\nend_reserved = \"1e30 GB\"\n",
            "memory.end_reserved",
        ),
        (
            "[[sites]]\npattern = \"x\"\nmax_end_bytes = \"x\"\n",
            "sites[0].max_end_bytes",
        ),
        (
            "[leaks]\nforbidden_sites = [\"(\"]\n",
            "leaks.forbidden_sites",
        ),
        ("[windows]\nspec = \"every:0\"\n", "[windows] spec"),
        ("[baseline]\ntolerance = \"ten percent\"\n", "tolerance"),
    ] {
        let e = Budget::parse(text).expect_err(text).to_string();
        assert!(e.contains(field), "{text}: {e}");
    }
    let b =
        Budget::parse("[baseline]\ntolerance = \"10%\"\n[leaks]\nmax_bytes_per_window = 4096\n")
            .unwrap();
    assert_eq!(b.tolerance, Tolerance::Percent(10.0));
    assert_eq!(b.tolerance.over(1000), 100);
    assert_eq!(b.leaks.max_bytes_per_window, Some(4096));
}

/// A file with two devices is checked per device: the budget applies to each, and the
/// leak on device 1 fails it while device 0 passes.
#[test]
fn budgets_apply_per_device() {
    let (code, out, _) = check(
        &["scenarios/two_devices_recv_leak.pickle"],
        BUDGET,
        &["--json"],
    );
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let devices = v["files"][0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    let case = |d: usize| &devices[d]["cases"][0];
    assert_eq!(case(0)["passed"], true);
    assert_eq!(case(1)["passed"], false);
    // The receive buffer of fixtures/gen's pipeline stage: seq 2048 x hidden 4096 x bf16.
    assert_eq!(case(1)["value"], 2048 * 4096 * 2);
    assert!(
        case(1)["site"]["label"]
            .as_str()
            .unwrap()
            .ends_with("create_tensor_recv_prev")
    );
}
