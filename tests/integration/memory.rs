//! The loader's memory is bounded by the input, whatever the input claims. A counting
//! allocator (for this test binary) measures the peak bytes allocated by the calling
//! thread while it loads, single-threaded, each of a set of inputs built to be as costly
//! per byte as the pickle format allows, plus the shipped fixtures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use leakscope::{LoadOptions, load_bytes};

use crate::common::*;

struct Counting;

thread_local! {
    // Bytes allocated by this thread and not yet freed, and the peak since the last reset.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // `try_with`: allocations during thread teardown find the slots gone.
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| {
            if v > p.get() {
                p.set(v)
            }
        });
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counts are kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Peak bytes this thread held above its level at the start while loading `data`, and
/// the load's error message if it failed.
fn peak_while_loading(data: &[u8]) -> (usize, Result<(), String>) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let mut opts = LoadOptions::default();
    opts.threads = false;
    let result = load_bytes(data, opts).map(drop).map_err(|e| e.to_string());
    ((PEAK.with(|p| p.get()) - base).max(0) as usize, result)
}

/// `n` repetitions of `unit` after a protocol-4 header, closed by STOP.
fn repeated(head: &[u8], unit: &[u8], n: usize, tail: &[u8]) -> Vec<u8> {
    let mut v = vec![0x80, 4];
    v.extend_from_slice(head);
    for _ in 0..n {
        v.extend_from_slice(unit);
    }
    v.extend_from_slice(tail);
    v.push(b'.');
    v
}

/// The loader's memory bound (docs/user-guide.md, "Memory"): at most 3 bytes held per
/// input byte read, plus 48 MiB. Inputs past it are refused; inputs within it must load.
const PER_BYTE: usize = 3;
const FIXED: usize = 48 << 20;

/// A valid snapshot's ending (a dict with an empty `segments`), after `n` repetitions of
/// `unit` that build values and throw them away.
fn discarded(unit: &[u8], n: usize) -> Vec<u8> {
    repeated(b"", unit, n, b"}\x8c\x08segments]s")
}

/// A top-level key the model does not know (so it is kept as an owned value) holding a
/// list of 100 references to a list of 1,000 references to one frames list of 20 frames:
/// 100,000 stacks, two million frame maps, from 4 KB. Found by the fuzzer (a 130 KB file
/// took 1.2 s and most of a gigabyte before its error): one reference to a stack was
/// counted as one value however many frames it expands to.
fn shared_stack_expanded() -> Vec<u8> {
    let mut v = b"\x80\x04}(\x8c\x08segments]\x8c\x01x](".to_vec();
    v.extend_from_slice(b"]\x94("); // A, memo 0
    v.extend_from_slice(b"]\x94("); // S, memo 1: 20 frames
    for _ in 0..20 {
        v.extend_from_slice(
            b"}(\x8c\x08filename\x8c\x08train.py\x8c\x04lineK\x07\x8c\x04name\x8c\x04stepu",
        );
    }
    v.extend_from_slice(b"e");
    v.extend_from_slice(&b"h\x01".repeat(999));
    v.extend_from_slice(b"e");
    v.extend_from_slice(&b"h\x00".repeat(99));
    v.extend_from_slice(b"eu.");
    v
}

#[test]
fn loader_memory_is_a_small_multiple_of_the_input() {
    const N: usize = 400_000;
    // Discarded values, 8 MiB of each: freed as the parse goes, so each loads (the
    // tables they would fill hold 16 to 64 bytes per input byte, far past the bound).
    const D: usize = 4 << 20;
    let must_load: Vec<(&str, Vec<u8>)> = vec![
        ("discarded empty lists", discarded(b"]0", D)),
        ("discarded empty dicts", discarded(b"}0", D)),
        ("discarded empty tuples", discarded(b")0", D)),
        ("discarded nested lists", discarded(b"]]a0", D / 2)),
        ("discarded dicts of lists", discarded(b"}K\x01]s0", D / 3)),
        ("discarded strings", discarded(b"X\x00\x00\x00\x000", D / 3)),
        (
            "discarded big ints",
            discarded(b"\x8a\x09\x01\x01\x01\x01\x01\x01\x01\x01\x010", D / 6),
        ),
        ("discarded tuples of lists", discarded(b"]]\x860", D / 2)),
        ("discarded marks of Nones", discarded(b"(NNNN1", D / 3)),
    ];
    let crafted: Vec<(&str, Vec<u8>)> = vec![
        ("live Nones in a list", repeated(b"](", b"N", 8 * D, b"e")),
        ("empty lists", repeated(b"", b"]", N, b"")),
        ("empty dicts", repeated(b"", b"}", N, b"")),
        ("empty tuples", repeated(b"", b")", N, b"")),
        ("marks", repeated(b"", b"(", N, b"")),
        ("Nones", repeated(b"", b"N", N, b"")),
        ("memoized Nones", repeated(b"", b"N\x94", N, b"")),
        ("memo gets", repeated(b"N\x94", b"h\x00", N, b"")),
        ("empty strings", repeated(b"", b"\x8c\x00", N, b"")),
        ("memoized strings", repeated(b"", b"\x8c\x00\x94", N, b"")),
        ("list items", repeated(b"](", b"N", N, b"e")),
        ("dict items", repeated(b"}(", b"K\x01N", N, b"u")),
        ("nested lists", repeated(b"", b"](", N, b"")),
        (
            "shared list doubled",
            repeated(b"]\x94", b"h\x00h\x00\x86\x94", N / 8, b""),
        ),
        (
            "big ints",
            repeated(
                b"",
                b"\x8a\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
                N / 16,
                b"",
            ),
        ),
        (
            "4 GiB string claim",
            b"\x80\x04X\xff\xff\xff\xffab.".to_vec(),
        ),
        (
            "2^60 frame claim",
            b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x10N.".to_vec(),
        ),
        ("far memo put", b"\x80\x04Nr\xff\xff\xff\x7f.".to_vec()),
        ("shared stack expanded", shared_stack_expanded()),
    ];
    let mut inputs = crafted;
    let loads = must_load.len();
    let mut all = must_load;
    all.append(&mut inputs);
    let mut inputs = all;
    for rel in [
        "encodings/tiny_protocol4.pickle",
        "encodings/tiny_cpp_pickler.pickle",
        "encodings/tiny.json",
        "scenarios/pp_last_stage_recv_pinned.pickle",
        "scenarios/control_no_leak.pickle",
    ] {
        inputs.push((rel, std::fs::read(fixture(rel)).expect("fixture")));
    }
    let mut worst = (0.0f64, "");
    let mut report = Vec::new();
    for (i, (name, data)) in inputs.iter().enumerate() {
        let (peak, result) = peak_while_loading(data);
        if i < loads {
            assert!(
                result.is_ok(),
                "{name}: {}",
                result.err().unwrap_or_default()
            );
        } else if let Err(e) = &result {
            assert!(!e.is_empty());
        }
        let ratio = peak as f64 / data.len() as f64;
        report.push(format!(
            "{name}: {} B in, peak {peak} B ({ratio:.1}x)",
            data.len()
        ));
        if data.len() > 100_000 && ratio > worst.0 {
            worst = (ratio, name);
        }
        assert!(
            peak <= PER_BYTE * data.len() + FIXED,
            "{name}: {} input bytes, {peak} bytes held at the peak\n{}",
            data.len(),
            report.join("\n")
        );
    }
    eprintln!(
        "loader memory (worst {:.1}x on {}):\n{}",
        worst.0,
        worst.1,
        report.join("\n")
    );
}
