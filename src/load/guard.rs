//! A mapped file that shrinks while it is read (a training job dumping the same path
//! again is an everyday event) must be an error, not a crash. Reading past the new end
//! of a file mapping raises SIGBUS; the handler here maps zeroed pages over the rest of a
//! watched mapping, notes the fault and returns, so the read goes on with zeros, and the
//! load then reports "the file changed while it was read". Faults outside the watched
//! mappings go to the handler that was there before (Rust's stack-overflow detector,
//! Python's faulthandler, or the default action).
//!
//! Reading the file in chunks instead would cost a copy of every byte and the page-cache
//! sharing that keeps a load under the file's size in memory; the guard costs nothing
//! until a fault.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Mappings watched at once (one per file being loaded; `ranks` loads one per core).
const SLOTS: usize = 64;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
    taken: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
    taken: AtomicBool::new(false),
};

static WATCHED: [Slot; SLOTS] = [FREE; SLOTS];

/// A watched mapping; the watch ends when this is dropped (before the map is unmapped).
pub(crate) struct Watch {
    slot: Option<usize>,
}

impl Watch {
    /// Watches `map` for faults. `None` when the guard cannot be set up here (not Linux,
    /// or every slot taken): the caller then reads the file another way.
    pub fn new(map: &[u8]) -> Option<Watch> {
        if !install() {
            return None;
        }
        let start = map.as_ptr() as usize;
        let end = start + map.len();
        for (i, s) in WATCHED.iter().enumerate() {
            if s.taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                s.faulted.store(false, Ordering::Relaxed);
                s.end.store(end, Ordering::Relaxed);
                s.start.store(start, Ordering::Release);
                return Some(Watch { slot: Some(i) });
            }
        }
        None
    }

    /// Whether a read of the mapping faulted (the file shrank under it).
    pub fn faulted(&self) -> bool {
        self.slot
            .is_some_and(|i| WATCHED[i].faulted.load(Ordering::Acquire))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            let s = &WATCHED[i];
            s.start.store(0, Ordering::Release);
            s.end.store(0, Ordering::Release);
            s.taken.store(false, Ordering::Release);
        }
    }
}

#[cfg(target_os = "linux")]
mod handler {
    use super::*;
    use std::sync::Once;

    static INSTALL: Once = Once::new();
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    /// The handler that was there before ours, kept as raw bytes so the signal handler
    /// can read it without a lock (written once, before ours is installed).
    static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

    pub fn install() -> bool {
        INSTALL.call_once(|| {
            // SAFETY: plain sigaction calls; PREVIOUS is written before our handler can run.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_sigbus as *const () as usize;
                new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
                libc::sigemptyset(&mut new.sa_mask);
                let prev = &raw mut PREVIOUS;
                if libc::sigaction(libc::SIGBUS, &new, (*prev).as_mut_ptr()) == 0 {
                    INSTALLED.store(true, Ordering::Release);
                }
            }
        });
        INSTALLED.load(Ordering::Acquire)
    }

    /// Only async-signal-safe work: atomics, `mmap`, `sigaction`.
    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
        let addr = unsafe { (*info).si_addr() } as usize;
        for s in WATCHED.iter() {
            let start = s.start.load(Ordering::Acquire);
            let end = s.end.load(Ordering::Acquire);
            if start != 0 && addr >= start && addr < end {
                // SAFETY: sysconf is async-signal-safe in practice on Linux (a read of a
                // constant); the range lies inside the watched mapping, which its owner
                // keeps mapped while the watch lives, so replacing its pages with zeroed
                // private ones touches nothing else.
                unsafe {
                    let page = libc::sysconf(libc::_SC_PAGESIZE).max(4096) as usize;
                    let from = addr & !(page - 1);
                    let len = (end - from).next_multiple_of(page);
                    let p = libc::mmap(
                        from as *mut libc::c_void,
                        len,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                        -1,
                        0,
                    );
                    if p == libc::MAP_FAILED {
                        break; // cannot repair: let the fault take its course
                    }
                }
                s.faulted.store(true, Ordering::Release);
                return;
            }
        }
        // Not ours: hand it to the handler before us, or to the default action.
        // SAFETY: PREVIOUS was written before this handler was installed.
        unsafe {
            let prev = &*(&raw const PREVIOUS).cast::<libc::sigaction>();
            let h = prev.sa_sigaction;
            if h == libc::SIG_DFL || h == libc::SIG_IGN {
                libc::sigaction(libc::SIGBUS, prev, std::ptr::null_mut());
                // Returning re-runs the faulting access, which now gets the default action.
                if h == libc::SIG_IGN {
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
                }
            } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(h);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
                f(sig);
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn install() -> bool {
    handler::install()
}

#[cfg(not(target_os = "linux"))]
fn install() -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;

    /// A mapping read past the end of a file that was cut short reads zeros and is
    /// noted, rather than killing the process.
    #[test]
    fn a_read_past_a_shrunken_file_is_noted_not_fatal() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 64 << 10]).unwrap();
        // SAFETY: the test owns the file.
        let map = unsafe { memmap2::Mmap::map(&f).unwrap() };
        let watch = Watch::new(&map).expect("the guard installs on Linux");
        assert!(!watch.faulted());
        assert_eq!(map[40 << 10], 7);
        f.set_len(4096).unwrap();
        // Past the new end: SIGBUS without the guard.
        let past = unsafe { std::ptr::read_volatile(map.as_ptr().add(40 << 10)) };
        assert_eq!(past, 0);
        assert!(watch.faulted());
        assert_eq!(map[100], 7, "pages before the cut are the file's");
        drop(watch);
        let again = Watch::new(&map).unwrap();
        assert!(!again.faulted(), "a slot starts clean");
    }
}
