//! Zeroing fresh memory on the second core. The parser's largest costs after decoding are
//! the first writes into the model's growing vectors (the pickle memo, the trace
//! columns): each new page is zeroed by the kernel on the writing thread. The parser
//! publishes where each vector is written up to; the pager thread asks the kernel to
//! back the next few megabytes of each (`MADV_POPULATE_WRITE`), so the parser finds them
//! ready. Populating changes no contents, so a stale range (a vector that moved since)
//! costs only the pages it backs.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// A growing vector's bytes: where it starts, where writing has reached, where its
/// reserved room ends (addresses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Region {
    pub start: usize,
    pub written: usize,
    pub end: usize,
}

impl Region {
    /// The region of `v`'s buffer.
    pub fn of<T>(v: &Vec<T>) -> Region {
        let start = v.as_ptr() as usize;
        let size = std::mem::size_of::<T>();
        Region {
            start,
            written: start + v.len() * size,
            end: start + v.capacity() * size,
        }
    }
}

/// Most regions tracked (the memo and six columns per trace for a few devices).
pub(crate) const MAX_REGIONS: usize = 32;
/// How far past the written end pages are backed ahead of the parser.
const AHEAD: usize = 4 << 20;
/// Least work worth a system call.
const CHUNK: usize = 2 << 20;
const PAGE: usize = 4096;

/// Regions published by the parser for the pager.
pub(crate) struct Frontiers {
    slots: [[AtomicUsize; 3]; MAX_REGIONS],
    count: AtomicUsize,
}

impl Default for Frontiers {
    fn default() -> Self {
        Frontiers {
            slots: std::array::from_fn(|_| Default::default()),
            count: AtomicUsize::new(0),
        }
    }
}

impl Frontiers {
    /// Publishes the parser's regions (at most [`MAX_REGIONS`]).
    pub fn publish(&self, regions: &[Region]) {
        let n = regions.len().min(MAX_REGIONS);
        for (slot, r) in self.slots.iter().zip(&regions[..n]) {
            slot[0].store(r.start, Relaxed);
            slot[1].store(r.written, Relaxed);
            slot[2].store(r.end, Relaxed);
        }
        self.count.store(n, Relaxed);
    }
}

/// The pager's side: how far each slot has been backed.
#[derive(Default)]
pub(crate) struct Populator {
    done: [(usize, usize); MAX_REGIONS],
    unsupported: bool,
}

impl Populator {
    /// Backs the next pages of every published region; true when it did any work.
    pub fn step(&mut self, fr: &Frontiers) -> bool {
        if self.unsupported {
            return false;
        }
        let n = fr.count.load(Relaxed).min(MAX_REGIONS);
        let mut busy = false;
        for i in 0..n {
            let s = &fr.slots[i];
            let (start, written, end) =
                (s[0].load(Relaxed), s[1].load(Relaxed), s[2].load(Relaxed));
            if start == 0 || written < start || end < written {
                continue;
            }
            let (base, done) = &mut self.done[i];
            if *base != start {
                *base = start;
                *done = written;
            }
            let from = (*done).max(written).next_multiple_of(PAGE);
            let to = end.min(written + AHEAD) & !(PAGE - 1);
            if to < from + CHUNK / 2 {
                continue;
            }
            // One huge page per call: the call holds the address-space lock for reading,
            // and the parser's own mremap or mmap must not wait behind a long one.
            let mut at = from;
            while at < to {
                let next = (at + CHUNK).min(to);
                if populate(at, next - at).is_err() {
                    self.unsupported = true;
                    return busy;
                }
                at = next;
            }
            *done = to;
            busy = true;
        }
        busy
    }
}

struct Unsupported;

#[cfg(target_os = "linux")]
fn populate(addr: usize, len: usize) -> Result<(), Unsupported> {
    const MADV_POPULATE_WRITE: i32 = 23;
    const EINVAL: i32 = 22;
    unsafe extern "C" {
        fn madvise(addr: *mut core::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    // SAFETY: MADV_POPULATE_WRITE backs pages as a write would, without changing any
    // byte; on a range that is no longer mapped (a vector that moved) it fails harmlessly.
    let rc = unsafe { madvise(addr as *mut core::ffi::c_void, len, MADV_POPULATE_WRITE) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(EINVAL) {
        // Kernels before 5.14 do not know the advice.
        return Err(Unsupported);
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn populate(_: usize, _: usize) -> Result<(), Unsupported> {
    Err(Unsupported)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Populating ahead of a vector changes none of its bytes, and a region that moved
    /// (a stale address) is harmless.
    #[test]
    fn populating_ahead_changes_nothing() {
        let mut v: Vec<u64> = Vec::with_capacity(4 << 20);
        v.extend(0..1000u64);
        let fr = Frontiers::default();
        fr.publish(&[Region::of(&v)]);
        let mut p = Populator::default();
        let first = p.step(&fr);
        // On kernels without MADV_POPULATE_WRITE the populator stops, doing nothing.
        assert!(first || p.unsupported);
        assert!(v.iter().copied().eq(0..1000u64));
        v.extend(1000..2000u64);
        assert!(v.iter().copied().eq(0..2000u64));
        let stale = Region::of(&v);
        drop(v);
        fr.publish(&[stale]);
        p.step(&fr);
    }
}
