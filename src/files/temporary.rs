//! Temporaries beside an output: short hidden names with a random part (so a stale one left
//! by a killed run, or by a process that had the same PID in another container, never
//! blocks a new run, and a long output name still fits), removed on every error path by
//! their owner's `Drop`, and on SIGINT, SIGTERM and SIGHUP by
//! [`remove_temporaries_on_signals`] where the program installs it.

use std::collections::hash_map::RandomState;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What every temporary's name starts with: hidden, and says whose it is.
pub const TEMPORARY_PREFIX: &str = ".leakscope-";

/// Every temporary alive in this process, so that a signal can remove them.
static LIVE: Mutex<Vec<(u64, PathBuf, bool)>> = Mutex::new(Vec::new());

/// Tells apart the temporaries of one process in [`LIVE`].
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// Tries at removing a temporary directory that other threads are still writing into.
#[cfg(unix)]
const SWEEP_TRIES: usize = 100;

/// Tries at a fresh name before giving up: 48 random bits make a second collision
/// practically impossible, so more than one failure means something else is wrong.
const NAME_TRIES: usize = 8;

/// A temporary file or directory, removed when dropped unless [`Temporary::keep`] is called.
#[derive(Debug)]
pub(crate) struct Temporary {
    serial: u64,
    path: PathBuf,
    dir: bool,
    armed: bool,
}

/// `.leakscope-` and 12 hex digits from a per-process random hasher, the PID, the clock and
/// a counter: never the target's own name, which may already be at the length limit.
fn fresh_name() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(SERIAL.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    format!(
        "{TEMPORARY_PREFIX}{:012x}.tmp",
        h.finish() & 0xffff_ffff_ffff
    )
}

impl Temporary {
    /// Creates a new temporary file in `target`'s directory.
    pub(crate) fn file_beside(target: &Path) -> std::io::Result<(Temporary, File)> {
        Temporary::fresh_beside(target, false, |p| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)
        })
    }

    /// Creates a new temporary directory in `target`'s directory.
    pub(crate) fn dir_beside(target: &Path) -> std::io::Result<Temporary> {
        Temporary::fresh_beside(target, true, |p| std::fs::create_dir(p)).map(|(t, ())| t)
    }

    /// Makes a temporary with `make` under a fresh name beside `target`, trying another
    /// name where one is taken.
    fn fresh_beside<T>(
        target: &Path,
        dir: bool,
        make: impl Fn(&Path) -> std::io::Result<T>,
    ) -> std::io::Result<(Temporary, T)> {
        let parent = super::target::directory_of(target);
        let mut last = None;
        for _ in 0..NAME_TRIES {
            // Registered before it exists, so a signal in between still finds it.
            let t = Temporary::registered(parent.join(fresh_name()), dir);
            match make(&t.path) {
                Ok(made) => return Ok((t, made)),
                Err(e) => {
                    t.disown();
                    if e.kind() != std::io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no fresh temporary name")))
    }

    fn registered(path: PathBuf, dir: bool) -> Temporary {
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut live) = LIVE.lock() {
            live.push((serial, path.clone(), dir));
        }
        Temporary {
            serial,
            path,
            dir,
            armed: true,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary became the output (it was renamed into place): it is no longer ours
    /// to remove.
    pub(crate) fn keep(self) {
        self.disown();
    }

    /// Not ours (any more, or it could not be made): left as it is.
    fn disown(mut self) {
        self.armed = false;
        self.forget();
    }

    fn forget(&self) {
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|(s, _, _)| *s != self.serial);
        }
    }
}

fn remove(path: &Path, dir: bool) {
    let _ = if dir {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if self.armed {
            remove(&self.path, self.dir);
            self.forget();
        }
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP remove this process's temporaries before it ends as
/// the signal says (killed by it, as without the handler). Call it first thing in a
/// program's `main`, before any thread starts: the signals are blocked in the calling
/// thread, so threads started later inherit the mask and only a waiting thread takes
/// them, where removing files and taking a lock is safe. Not for libraries loaded into
/// another program (the Python module's functions), whose signals are the host's.
#[cfg(unix)]
pub fn remove_temporaries_on_signals() {
    const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    // SAFETY: plain signal-mask calls on a zeroed, then initialised sigset_t.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        set
    };
    let waiter = std::thread::Builder::new()
        .name("leakscope-signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: sigwait on the set blocked above; it only writes `sig`.
            while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
            // Held to the end, so no temporary appears after the sweep.
            let live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
            for (_, path, dir) in live.iter() {
                // Other threads may still be writing into a directory while it is
                // removed (a file made after the listing makes the removal fail): retry
                // until it is gone.
                for _ in 0..SWEEP_TRIES {
                    remove(path, *dir);
                    if std::fs::symlink_metadata(path).is_err() {
                        break;
                    }
                }
            }
            // SAFETY: the default action back, unblocked in this thread, then raised here:
            // the process ends as the signal's default says.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::raise(sig);
            }
            drop(live);
            std::process::exit(128 + sig);
        });
    if waiter.is_err() {
        // No thread to take them: let the signals act as before.
        // SAFETY: as above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

/// Elsewhere the signals keep their default action.
#[cfg(not(unix))]
pub fn remove_temporaries_on_signals() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_hidden_and_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("x".repeat(250));
        let (a, _fa) = Temporary::file_beside(&long).unwrap();
        let (b, _fb) = Temporary::file_beside(&long).unwrap();
        for t in [&a, &b] {
            let name = t.path().file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.starts_with(TEMPORARY_PREFIX), "{name}");
            assert_eq!(name.len(), TEMPORARY_PREFIX.len() + 12 + 4, "{name}");
        }
        assert_ne!(a.path(), b.path());
        let d = Temporary::dir_beside(&long).unwrap();
        std::fs::write(d.path().join("t.parquet"), b"x").unwrap();
        drop((a, b, d));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_kept_temporary_stays_and_leaves_the_registry() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _f) = Temporary::file_beside(&dir.path().join("out")).unwrap();
        let path = t.path().to_path_buf();
        let serial = t.serial;
        assert!(LIVE.lock().unwrap().iter().any(|(s, _, _)| *s == serial));
        t.keep();
        assert!(path.exists());
        assert!(!LIVE.lock().unwrap().iter().any(|(s, _, _)| *s == serial));
    }
}
