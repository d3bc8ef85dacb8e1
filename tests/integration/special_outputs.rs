//! Outputs onto what the tool cannot own: a character device, a FIFO, standard output, a
//! symlink to one of them, a link that leads nowhere; and nothing left behind when a
//! write fails (a full disk), when the run is interrupted, or by a killed run. Every node
//! is made by the test in its own directory: the system's `/dev/null` is never named.
//! Run as root, each case also runs as the unprivileged `nobody`.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::*;

const SCENARIO: &str = "scenarios/pp_last_stage_recv_pinned.pickle";
const NOBODY: u32 = 65534;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A directory anyone may use, holding the scenario as `run.pickle` and a budget.
struct Place {
    dir: tempfile::TempDir,
    run: PathBuf,
    budget: PathBuf,
}

fn place() -> Place {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = dir.path().join("run.pickle");
    std::fs::copy(fixture(SCENARIO), &run).unwrap();
    let budget = dir.path().join("budget.toml");
    std::fs::write(&budget, "[leaks]\nmax_bytes_per_window = \"1 TiB\"\n").unwrap();
    Place { dir, run, budget }
}

/// Every writer of the command line, with its output at `out`.
fn writers(p: &Place, out: &str) -> Vec<Vec<String>> {
    let r = s(&p.run);
    let b = s(&p.budget);
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        v(&["report", r, "-o", out]),
        v(&["flamegraph", r, "-o", out]),
        v(&["flamegraph", r, "--folded", "-o", out]),
        v(&["export", r, "--perfetto", out]),
        v(&["export", r, "--pprof", out]),
        v(&["slice", r, "--from", "event:10", "-o", out]),
        v(&["check", r, "--budget", b, "--junit", out]),
        v(&["convert", r, out, "--format", "json"]),
        v(&["convert", r, out, "--format", "msgpack"]),
    ]
}

/// The binary with `args`, as `uid` when given (the test runs as root then).
fn command(args: &[String], uid: Option<u32>) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_leakscope"));
    c.args(args).env("NO_COLOR", "1").stdin(Stdio::null());
    if let Some(u) = uid {
        c.uid(u).gid(u);
    }
    c
}

/// Who the cases run as: ourselves, and `nobody` too when we are root.
fn users() -> Vec<Option<u32>> {
    if is_root() {
        vec![None, Some(NOBODY)]
    } else {
        vec![None]
    }
}

fn mknod_char(path: &Path, major: u32, minor: u32) -> bool {
    let c = std::ffi::CString::new(s(path)).unwrap();
    // SAFETY: mknod and chmod on a path inside the test's own directory.
    unsafe {
        let ok = libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        ) == 0;
        ok && libc::chmod(c.as_ptr(), 0o666) == 0
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(s(path)).unwrap();
    // SAFETY: mkfifo and chmod on a path inside the test's own directory.
    unsafe {
        assert_eq!(libc::mkfifo(c.as_ptr(), 0o666), 0);
        assert_eq!(libc::chmod(c.as_ptr(), 0o666), 0);
    }
}

/// What each writer puts in a regular file: the bytes a stream must receive.
fn reference_bytes(args: &[String], out: &Path) -> Vec<u8> {
    let st = command(args, None)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "{args:?}");
    let bytes = std::fs::read(out).unwrap();
    std::fs::remove_file(out).unwrap();
    bytes
}

/// Runs `args` with a reader on the FIFO at `fifo`; returns (exit code, bytes read).
fn through_fifo(args: &[String], fifo: &Path, uid: Option<u32>) -> (i32, Vec<u8>) {
    let path = fifo.to_path_buf();
    let reader = std::thread::spawn(move || {
        let mut f = std::fs::File::open(&path).unwrap();
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).unwrap();
        buf
    });
    let st = command(args, uid)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    if !reader.is_finished() {
        // The command never opened the FIFO: a writer that opens and closes it ends the
        // reader's wait (the open succeeds since the reader is waiting).
        let c = std::ffi::CString::new(s(fifo)).unwrap();
        // SAFETY: open and close of the test's own FIFO.
        unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK);
            if fd >= 0 {
                libc::close(fd);
            }
        }
    }
    (st.code().unwrap_or(-1), reader.join().unwrap())
}

#[test]
fn devices_fifos_and_links_to_them_are_written_through_and_stay_what_they_are() {
    let p = place();
    let reference_out = p.dir.path().join("reference.out");
    let fifo = p.dir.path().join("out.fifo");
    mkfifo(&fifo);
    let device = p.dir.path().join("null.dev");
    let have_device = mknod_char(&device, 1, 3);
    assert!(
        have_device || !is_root(),
        "root could not make a device node in {}",
        p.dir.path().display()
    );
    let to_device = p.dir.path().join("link-to-null.dev");
    std::os::unix::fs::symlink(&device, &to_device).unwrap();
    let to_fifo = p.dir.path().join("link-to-fifo");
    std::os::unix::fs::symlink(&fifo, &to_fifo).unwrap();
    let mut cases = 0;
    for (i, reference_args) in writers(&p, s(&reference_out)).into_iter().enumerate() {
        let expected = reference_bytes(&reference_args, &reference_out);
        assert!(!expected.is_empty());
        for uid in users() {
            for node in [&fifo, &to_fifo] {
                let args = &writers(&p, s(node))[i];
                let (code, got) = through_fifo(args, node, uid);
                assert_eq!(code, 0, "{args:?} as {uid:?}");
                assert!(
                    std::fs::metadata(&fifo).unwrap().file_type().is_fifo(),
                    "{args:?}"
                );
                assert_eq!(got, expected, "{args:?} as {uid:?}");
                cases += 1;
            }
            if have_device {
                for node in [&device, &to_device] {
                    let args = &writers(&p, s(node))[i];
                    let st = command(args, uid)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .unwrap();
                    assert_eq!(st.code(), Some(0), "{args:?} as {uid:?}");
                    let m = std::fs::metadata(&device).unwrap();
                    assert!(m.file_type().is_char_device(), "{args:?} as {uid:?}");
                    assert!(
                        std::fs::symlink_metadata(&to_device)
                            .unwrap()
                            .file_type()
                            .is_symlink()
                    );
                    cases += 1;
                }
            }
        }
    }
    let per_user = if have_device { 4 } else { 2 };
    assert_eq!(cases, 9 * per_user * users().len());
    let left = temporaries(p.dir.path());
    assert!(left.is_empty(), "{left:?}");
}

/// The names of the temporaries left in `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(leakscope::files::TEMPORARY_PREFIX))
        .collect()
}

#[test]
fn dash_and_links_to_standard_output_put_the_whole_output_down_the_pipe() {
    let p = place();
    let reference_out = p.dir.path().join("reference.out");
    let to_fd1 = p.dir.path().join("stdout-link");
    std::os::unix::fs::symlink("/proc/self/fd/1", &to_fd1).unwrap();
    for (i, reference_args) in writers(&p, s(&reference_out)).into_iter().enumerate() {
        let expected = reference_bytes(&reference_args, &reference_out);
        for uid in users() {
            for out in ["-", s(&to_fd1)] {
                let args = &writers(&p, out)[i];
                let o = command(args, uid).output().unwrap();
                let err = String::from_utf8_lossy(&o.stderr);
                assert_eq!(o.status.code(), Some(0), "{args:?} as {uid:?}: {err}");
                assert_eq!(o.stdout, expected, "{args:?} as {uid:?}: {err}");
            }
        }
    }
    assert!(
        std::fs::symlink_metadata(&to_fd1)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // What the command prints itself goes to standard error, the stream holds the file.
    let o = command(
        &writers(&p, "-")[6]
            .iter()
            .cloned()
            .chain(["--json".to_string()])
            .collect::<Vec<_>>(),
        None,
    )
    .output()
    .unwrap();
    assert!(o.stdout.starts_with(b"<?xml"), "{:?}", &o.stdout[..20]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("leakscope.check/"));
}

#[test]
fn links_that_lead_nowhere_are_refused_and_a_link_to_a_file_stays_a_link() {
    let p = place();
    let dangling = p.dir.path().join("dangling.html");
    std::os::unix::fs::symlink(p.dir.path().join("gone/away.html"), &dangling).unwrap();
    let a = p.dir.path().join("loop-a");
    let b = p.dir.path().join("loop-b");
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    for uid in users() {
        for (link, says) in [(&dangling, "does not exist"), (&a, "loop")] {
            for args in writers(&p, s(link)) {
                let o = command(&args, uid).output().unwrap();
                let err = String::from_utf8_lossy(&o.stderr);
                assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
                assert!(err.contains(says), "{args:?}: {err}");
                assert!(
                    std::fs::symlink_metadata(link)
                        .unwrap()
                        .file_type()
                        .is_symlink()
                );
            }
        }
    }
    assert!(!p.dir.path().join("gone").exists());
    // A link to a regular file: the file gets the output, the link stays.
    let real = p.dir.path().join("real.svg");
    std::fs::write(&real, b"old").unwrap();
    let link = p.dir.path().join("link.svg");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    for args in writers(&p, s(&link)) {
        let (code, _, err) = run_cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{args:?}"
        );
        assert_ne!(std::fs::read(&real).unwrap(), b"old", "{args:?}");
        std::fs::write(&real, b"old").unwrap();
    }
    assert!(temporaries(p.dir.path()).is_empty());
}

#[test]
fn two_outputs_of_one_command_at_one_path_are_refused() {
    let p = place();
    let out = p.dir.path().join("out.bin");
    let dotted = p.dir.path().join(".").join("out.bin");
    let r = s(&p.run);
    for (a, b) in [
        (s(&out), s(&out)),
        (s(&out), s(&dotted)),
        ("-", "/dev/stdout"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_leakscope"))
            .args(["export", r, "--perfetto", a, "--pprof", b])
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{a} {b}: {err}");
        assert!(err.contains("name one file"), "{err}");
        assert!(o.stdout.is_empty());
    }
    assert!(!out.exists());
    // A Perfetto trace named like one of the Parquet tables in the same export.
    let tables = p.dir.path().join("tables");
    let (code, _, err) = run_cli(&[
        "export",
        r,
        "--parquet",
        s(&tables),
        "--perfetto",
        s(&tables.join("files.parquet")),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(!tables.exists());
}

#[test]
fn a_long_output_name_works_and_a_stale_temporary_does_not_block_the_next_run() {
    let p = place();
    let long = p.dir.path().join(format!("{}.html", "r".repeat(245)));
    assert_eq!(long.file_name().unwrap().len(), 250);
    let (code, _, err) = run_cli(&["report", s(&p.run), "-o", s(&long)]);
    assert_eq!(code, 0, "{err}");
    assert!(
        std::fs::read_to_string(&long)
            .unwrap()
            .ends_with("</html>\n")
    );
    // A run killed with SIGKILL once its temporary exists leaves it behind; the next run,
    // with the same PID or not (a container's PID 1), makes its own and is not blocked.
    if !have_python() {
        eprintln!("skipped the stale-temporary half: no python3");
        return;
    }
    let big = p.dir.path().join("big.pickle");
    big_snapshot(&big, 200_000);
    let tables = p.dir.path().join("tables");
    let (_, stale) = export_signalled_once_staged(&big, &tables, libc::SIGKILL);
    assert!(
        !stale.is_empty(),
        "the killed run's temporary was never seen"
    );
    assert_eq!(temporaries(p.dir.path()), stale, "SIGKILL leaves it");
    let (code, _, err) = run_cli(&["export", s(&p.run), "--parquet", s(&tables)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_dir(&tables).unwrap().count(), 7);
    // The killed run's temporary is still there, untouched; ours is gone.
    assert_eq!(temporaries(p.dir.path()), stale);
}

/// Mounts a tmpfs of `kib` KiB at `dir` (root only); unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, kib: u32) -> Option<Tmpfs> {
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={kib}k,mode=0777"),
                "tmpfs",
            ])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        st.success().then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_fails_with_exit_1_and_leaves_the_earlier_output_and_no_temporary() {
    let p = place();
    let small = p.dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let Some(_fs) = Tmpfs::mount(&small, 16) else {
        assert!(!is_root(), "root could not mount a tmpfs");
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    };
    let report = small.join("report.html");
    std::fs::write(&report, b"earlier").unwrap();
    for uid in users() {
        let args: Vec<String> = ["report", s(&p.run), "-o", s(&report)]
            .iter()
            .map(|x| x.to_string())
            .collect();
        let o = command(&args, uid).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("No space left on device"), "{err}");
        assert_eq!(std::fs::read(&report).unwrap(), b"earlier");
        assert_eq!(temporaries(&small), Vec::<String>::new());
    }
    let tables = small.join("tables");
    let (code, _, err) = run_cli(&["export", s(&p.run), "--parquet", s(&tables)]);
    assert_eq!(code, 1, "{err}");
    assert!(!tables.exists());
    assert_eq!(temporaries(&small), Vec::<String>::new());
    // A private full device: the write's error, and the node stays a device.
    let full = p.dir.path().join("full.dev");
    assert!(mknod_char(&full, 1, 7));
    let (code, _, err) = run_cli(&["flamegraph", s(&p.run), "-o", s(&full)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        std::fs::metadata(&full)
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

#[test]
fn sigint_and_sigterm_during_an_export_leave_no_temporary() {
    if !have_python() {
        eprintln!("skipped: no python3");
        return;
    }
    let p = place();
    let big = p.dir.path().join("big.pickle");
    big_snapshot(&big, 300_000);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let out = p.dir.path().join("tables");
        let (st, seen) = export_signalled_once_staged(&big, &out, sig);
        assert!(
            !seen.is_empty(),
            "the export finished before its temporary was seen"
        );
        assert_eq!(st.signal(), Some(sig), "{st:?}");
        assert_eq!(temporaries(p.dir.path()), Vec::<String>::new());
        assert!(!out.exists());
    }
}

/// Runs `export BIG --parquet TABLES` and sends it `sig` as soon as its temporary shows
/// beside `tables`; returns how it ended and the temporaries seen then (none: it ended
/// first).
fn export_signalled_once_staged(
    big: &Path,
    tables: &Path,
    sig: libc::c_int,
) -> (std::process::ExitStatus, Vec<String>) {
    let dir = tables.parent().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args(["export", s(big), "--parquet", s(tables)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut seen = Vec::new();
    while child.try_wait().unwrap().is_none() && started.elapsed().as_secs() < 60 {
        seen = temporaries(dir);
        if !seen.is_empty() {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(child.id() as i32, sig) };
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    (child.wait().unwrap(), seen)
}
