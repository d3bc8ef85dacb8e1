//! The binary's allocator: the system's, plus a transparent-huge-page hint for large
//! blocks. Loading a big snapshot grows a few large vectors (trace columns, the pickle
//! memo) by hundreds of megabytes; with 4 KiB pages that is tens of thousands of page
//! faults, about a tenth of the load (measured with `perf`). Asking for 2 MiB pages on
//! those blocks (`madvise(MADV_HUGEPAGE)`, honoured when the system's THP setting is
//! `madvise` or `always`) removes most of them. Nothing changes elsewhere, and the
//! library itself leaves the choice of allocator to its users.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks at least this large get the hint.
const THRESHOLD: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

#[cfg(target_os = "linux")]
unsafe extern "C" {
    fn madvise(addr: *mut core::ffi::c_void, len: usize, advice: i32) -> i32;
}

/// The system allocator with a huge-page hint for large blocks (Linux only).
pub struct HugePageHint;

#[cfg(target_os = "linux")]
fn advise(p: *mut u8, size: usize) {
    const MADV_HUGEPAGE: i32 = 14;
    if p.is_null() || size < THRESHOLD {
        return;
    }
    // Only whole huge pages inside the block: the hint must not touch its neighbours.
    let start = (p as usize).next_multiple_of(HUGE_PAGE);
    let end = (p as usize + size) & !(HUGE_PAGE - 1);
    if end > start {
        // SAFETY: the range lies inside a block just returned by the allocator; the hint
        // changes how pages are backed, never their contents. A failure is harmless.
        unsafe {
            madvise(start as *mut core::ffi::c_void, end - start, MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_: *mut u8, _: usize) {}

// SAFETY: every call goes to the system allocator with the caller's arguments unchanged.
unsafe impl GlobalAlloc for HugePageHint {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if new_size > layout.size() {
            advise(p, new_size);
        }
        p
    }
}
