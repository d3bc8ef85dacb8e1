//! The binary: commands, exit codes, JSON output, conversion.

use std::process::Command;

use crate::common::*;

fn leakscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("the binary runs")
}

#[test]
fn help_lists_every_command() {
    let out = leakscope(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["summary", "convert", "completions"] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(cmd))
            .unwrap_or_else(|| panic!("{cmd} missing from --help:\n{text}"));
        assert!(
            line.len() > cmd.len() + 10,
            "{cmd} has no description: {line}"
        );
    }
}

#[test]
fn completions_are_printed() {
    for shell in ["bash", "zsh", "fish"] {
        let out = leakscope(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("leakscope") && text.contains("summary"),
            "{shell}"
        );
    }
}

#[test]
fn summary_table_and_json() {
    let f = fixture("encodings/tiny_protocol4.pickle");
    let out = leakscope(&["summary", f.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    // 40 MiB reserved on device 0 (two 20 MiB segments), 1 unmatched free.
    assert!(text.contains("40.0 MiB"), "{text}");
    assert!(text.contains("1 frees with no alloc"), "{text}");
    assert!(!text.contains('\x1b'), "NO_COLOR must disable escapes");

    let out = leakscope(&["summary", "--json", f.to_str().unwrap()]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "leakscope.summary/2");
    for k in [
        "container",
        "pickle_protocol",
        "compression",
        "producer",
        "layout",
    ] {
        assert!(v["format"].get(k).is_some(), "format.{k}");
    }
    for k in std::iter::once(&"devices").chain(TRUTH_DEVICE_FIELDS) {
        assert!(v["totals"].get(k).is_some(), "totals.{k}");
    }
    for k in [
        "wrapped",
        "unmatched_frees",
        "pre_trace_blocks",
        "first_time_us",
        "last_time_us",
    ] {
        assert!(v["trace"].get(k).is_some(), "trace.{k}");
    }
    // Hand arithmetic on the fixture (fixtures/gen/tiny_encodings.py): device 0 holds an
    // 8 MiB block (8 MiB - 512 requested), a 4 MiB block (4 MiB - 100 requested) and a
    // 3 MiB block pending its free (3 MiB requested); device 1 a 512-byte block (300
    // requested). Allocated leaves the pending block out, active and requested keep it
    // (as torch's memory_allocated, active_bytes and requested_bytes).
    let mib = 1u64 << 20;
    assert_eq!(v["totals"]["allocated_bytes"], 12 * mib + 512);
    assert_eq!(v["totals"]["active_bytes"], 15 * mib + 512);
    assert_eq!(v["totals"]["requested_bytes"], 15 * mib - 612 + 300);
    assert_eq!(v["totals"]["reserved_bytes"], 42 * mib);
    assert_eq!(v["totals"]["devices"], 2);
    assert_eq!(v["totals"]["actions"]["alloc"], 4);
    assert_eq!(v["frames"]["unique_stacks"], 3);
}

#[test]
fn bad_input_exits_2_with_the_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evil.pickle");
    std::fs::write(&p, b"\x80\x04cos\nsystem\n.").unwrap();
    let out = leakscope(&["summary", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("evil.pickle") && err.contains("opcode GLOBAL at byte 2"),
        "{err}"
    );

    let out = leakscope(&["summary", "/nonexistent/x.pickle"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/x.pickle"));
}

#[test]
fn convert_to_cache_and_json_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("encodings/tiny_protocol4.pickle");
    let cache = dir.path().join("t.msgpack");
    let json = dir.path().join("t.json");
    assert!(
        leakscope(&["convert", src.to_str().unwrap(), cache.to_str().unwrap()])
            .status
            .success()
    );
    assert!(
        leakscope(&["convert", cache.to_str().unwrap(), json.to_str().unwrap()])
            .status
            .success()
    );
    let a = leakscope(&["summary", "--json", src.to_str().unwrap()]);
    let b = leakscope(&["summary", "--json", cache.to_str().unwrap()]);
    let c = leakscope(&["summary", "--json", json.to_str().unwrap()]);
    let parse = |o: &std::process::Output| content_only(serde_json::from_slice(&o.stdout).unwrap());
    assert_eq!(parse(&a), parse(&b));
    assert_eq!(parse(&a), parse(&c));
    let bad = leakscope(&[
        "convert",
        src.to_str().unwrap(),
        dir.path().join("x.txt").to_str().unwrap(),
    ]);
    // An output whose format the name does not tell is a usage error.
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn top_table_json_and_usage_errors() {
    let f = fixture("scenarios/pp_last_stage_recv_pinned.pickle");
    let f = f.to_str().unwrap();
    let out = leakscope(&["top", f, "--at", "peak", "--limit", "3"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("total") && text.contains("more)"), "{text}");

    let out = leakscope(&["top", f, "--at", "peak", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "leakscope.top/4");
    assert_eq!(v["at"], "peak");
    let d = &v["devices"][0];
    for k in ["kind", "event_index", "time_us", "requested_bytes"] {
        assert!(d["at"].get(k).is_some(), "at.{k}");
    }
    let row = &d["rows"][0];
    for k in ["site", "bytes", "blocks"] {
        assert!(row.get(k).is_some(), "rows[0].{k}");
    }
    for k in ["name", "filename", "line", "label"] {
        assert!(row["site"].get(k).is_some(), "rows[0].site.{k}");
    }
    let sum: u64 = d["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .sum::<u64>()
        + d["rest"]["bytes"].as_u64().unwrap();
    assert_eq!(sum, d["at"]["requested_bytes"].as_u64().unwrap());

    for (args, msg) in [
        (vec!["top", f, "--at", "middle"], "use end, peak, oom"),
        (vec!["top", f, "--at", "oom"], "no oom event"),
        (vec!["top", f, "--at", "event:99999999"], "past the end"),
        (vec!["top", f, "--device", "7"], "no device 7"),
        (
            vec!["top", f, "--by", "colour"],
            "group by site, user, stack, file, function, role, annotation, metadata, compile or pool",
        ),
        (vec!["top", f, "--focus", "("], "--focus"),
        (vec!["top", f, "--device", "gpu1"], "use a device index"),
        (vec!["leaks", f, "--windows", "every:0"], "positive number"),
        (
            vec!["leaks", f, "--within", "phase:fwd"],
            "use annotation:REGEX",
        ),
        // A call tree keeps whole stacks: it has no --by to be silently ignored.
        (vec!["tree", f, "--by", "file"], "the tree groups by role"),
        (
            vec!["flamegraph", f, "--folded", "--by", "stack"],
            "unexpected argument '--by'",
        ),
    ] {
        let out = leakscope(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}
