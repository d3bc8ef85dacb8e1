//! Files the tool writes: never over an input (by any name), whole or not at all, and a
//! snapshot that changes while it is read is an error, not a crash.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

const SCENARIO: &str = "scenarios/pp_last_stage_recv_pinned.pickle";

/// A directory with the scenario as `run.pickle` (also as `run.json`, a pickle under a
/// JSON name, which `convert` can be asked to write) and a budget.
fn workspace() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.pickle");
    std::fs::copy(fixture(SCENARIO), &run).unwrap();
    let json_named = dir.path().join("run.json");
    std::fs::copy(fixture(SCENARIO), &json_named).unwrap();
    let budget = dir.path().join("budget.toml");
    std::fs::write(&budget, "[leaks]\nmax_bytes_per_window = \"1 TiB\"\n").unwrap();
    (dir, run, json_named, budget)
}

/// The ways of naming `target` again: the same path, through `./`, through a symlink.
fn names_of(target: &Path) -> Vec<PathBuf> {
    let dir = target.parent().unwrap();
    let name = target.file_name().unwrap();
    let link = dir.join(format!("link-to-{}", name.to_string_lossy()));
    if !link.exists() {
        std::os::unix::fs::symlink(target, &link).unwrap();
    }
    vec![target.to_path_buf(), dir.join(".").join(name), link]
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn no_writer_writes_over_an_input_by_any_name() {
    let (_dir, run, json_named, budget) = workspace();
    let original = std::fs::read(&run).unwrap();
    let original_budget = std::fs::read(&budget).unwrap();
    let mut cases = 0;
    for out in names_of(&run) {
        let o = s(&out);
        let r = s(&run);
        let b = s(&budget);
        let commands: Vec<Vec<&str>> = vec![
            vec!["report", r, "-o", o],
            vec!["flamegraph", r, "-o", o],
            vec!["flamegraph", r, "--folded", "-o", o],
            vec!["export", r, "--perfetto", o],
            vec!["export", r, "--pprof", o],
            vec!["check", r, "--budget", b, "--junit", o],
        ];
        for args in commands {
            let (code, _, err) = run_cli(&args);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(err.contains("it is the input"), "{args:?}: {err}");
            assert_eq!(std::fs::read(&run).unwrap(), original, "{args:?}");
            cases += 1;
        }
    }
    // The budget given to check is an input too.
    for out in names_of(&budget) {
        let (code, _, err) =
            run_cli(&["check", s(&run), "--budget", s(&budget), "--junit", s(&out)]);
        assert_eq!(code, 2, "{err}");
        assert_eq!(std::fs::read(&budget).unwrap(), original_budget);
        cases += 1;
    }
    // convert's output must end in .json or .msgpack: a pickle named run.json.
    let original_json = std::fs::read(&json_named).unwrap();
    for out in names_of(&json_named) {
        let (code, _, err) = run_cli(&["convert", s(&json_named), s(&out)]);
        assert_eq!(code, 2, "{err}");
        assert_eq!(std::fs::read(&json_named).unwrap(), original_json);
        cases += 1;
    }
    // A Parquet table named like an input (files.parquet is one of the tables).
    let as_table = run.parent().unwrap().join("files.parquet");
    std::fs::copy(&run, &as_table).unwrap();
    let (code, _, err) = run_cli(&[
        "export",
        s(&as_table),
        "--parquet",
        s(run.parent().unwrap()),
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(std::fs::read(&as_table).unwrap(), original);
    assert_eq!(cases, 3 * 6 + 3 + 3);
}

#[test]
fn outputs_beside_the_inputs_are_written_and_leave_no_temporary() {
    let (dir, run, _, budget) = workspace();
    let report = dir.path().join("report.html");
    let (code, _, err) = run_cli(&["report", s(&run), "-o", s(&report)]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_cli(&[
        "check",
        s(&run),
        "--budget",
        s(&budget),
        "--junit",
        s(&dir.path().join("j.xml")),
    ]);
    assert_eq!(code, 0, "{err}");
    let tables = dir.path().join("tables");
    let (code, _, err) = run_cli(&["export", s(&run), "--parquet", s(&tables)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_dir(&tables).unwrap().count(),
        7,
        "one file per table"
    );
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(leakscope::files::TEMPORARY_PREFIX))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        std::fs::read_to_string(&report)
            .unwrap()
            .ends_with("</html>\n")
    );
}

#[test]
fn a_killed_convert_leaves_the_earlier_output_and_racing_converts_leave_one_whole_file() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.pickle");
    big_snapshot(&big, 250_000);
    let out = dir.path().join("out.json");
    let (code, _, err) = run_cli(&["convert", s(&big), s(&out)]);
    assert_eq!(code, 0, "{err}");
    let earlier = std::fs::read(&out).unwrap();
    let started = std::time::Instant::now();
    let (code, _, _) = run_cli(&["convert", s(&big), s(&out)]);
    assert_eq!(code, 0);
    let full = started.elapsed();
    for frac in [0.3, 0.6, 1.0] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_leakscope"))
            .args(["convert", s(&big), s(&out)])
            .spawn()
            .unwrap();
        std::thread::sleep(full.mul_f64(frac * 0.9));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(std::fs::read(&out).unwrap(), earlier, "killed at {frac}");
    }
    for round in 0..4 {
        let kids: Vec<_> = (0..2)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_leakscope"))
                    .args(["convert", s(&big), s(&out)])
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut k in kids {
            assert!(k.wait().unwrap().success(), "round {round}");
        }
        let snap = load(&out);
        assert_eq!(
            snap.device_traces.as_ref().unwrap()[0].len(),
            250_000,
            "round {round}"
        );
    }
}

#[test]
fn a_snapshot_cut_short_while_it_is_read_is_an_error_not_a_signal() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let master = dir.path().join("master.pickle");
    big_snapshot(&master, 800_000);
    let victim = dir.path().join("victim.pickle");
    std::fs::copy(&master, &victim).unwrap();
    let started = std::time::Instant::now();
    let (code, _, err) = run_cli(&["summary", s(&victim)]);
    assert_eq!(code, 0, "{err}");
    let full = started.elapsed();
    let mut changed = 0;
    for frac in [0.1, 0.3, 0.5, 0.7] {
        std::fs::copy(&master, &victim).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_leakscope"))
            .args(["summary", s(&victim)])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(full.mul_f64(frac));
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&victim)
            .unwrap();
        f.set_len(1 << 20).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.signal(), None, "killed by a signal at {frac}");
        let code = out.status.code().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // Cut after the load finished, the summary stands; otherwise the load says why.
        if code != 0 {
            assert_eq!(code, 2, "{err}");
            assert!(err.contains("the file changed while it was read"), "{err}");
            changed += 1;
        }
    }
    assert!(changed >= 2, "only {changed} cuts landed inside the load");
}

#[test]
fn special_files_and_directories_are_named_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_cli(&["summary", s(dir.path())]);
    assert_eq!(code, 2);
    assert!(
        err.contains("is a directory: use `ranks` or `export`"),
        "{err}"
    );
    let fifo = dir.path().join("pipe.pickle");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a plain mkfifo on a path in our temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let started = std::time::Instant::now();
    let (code, _, err) = run_cli(&["summary", s(&fifo)]);
    assert_eq!(code, 2);
    assert!(err.contains("not a regular file (a FIFO or pipe)"), "{err}");
    assert!(started.elapsed().as_secs() < 2);
    let (code, _, err) = run_cli(&["summary", "/proc/self/status"]);
    assert_eq!(code, 2);
    assert!(err.contains("reports a size of 0 yet has content"), "{err}");
}

#[test]
fn budgets_and_baselines_are_read_with_a_limit() {
    let started = std::time::Instant::now();
    let f = fixture(SCENARIO);
    let (code, _, err) = run_cli(&["check", s(&f), "--budget", "/dev/zero"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("larger than 1 MiB"), "{err}");
    let (_d, _, _, budget) = workspace();
    let (code, _, err) = run_cli(&[
        "check",
        s(&f),
        "--budget",
        s(&budget),
        "--baseline",
        "/dev/zero",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("larger than 1 MiB"), "{err}");
    assert!(started.elapsed().as_secs() < 5);
}
