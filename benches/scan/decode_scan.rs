//! The reference point for the loader's speed: a decode-only scan of a pickle. It steps
//! over every opcode (reading only what it needs to find the next one) and counts
//! opcodes and MEMOIZEs, building nothing. benches/run.sh builds it with `rustc -O` and
//! times it like the other commands; no program that builds anything from the pickle
//! can beat it on one core.
//!
//!     rustc -O --edition 2021 benches/scan/decode_scan.rs -o target/bench/decode_scan
//!     target/bench/decode_scan FILE

use std::os::fd::AsRawFd;

unsafe extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
}

fn u32_at(d: &[u8], p: usize) -> Option<usize> {
    Some(u32::from_le_bytes(d.get(p..p + 4)?.try_into().ok()?) as usize)
}

fn u64_at(d: &[u8], p: usize) -> Option<usize> {
    usize::try_from(u64::from_le_bytes(d.get(p..p + 8)?.try_into().ok()?)).ok()
}

/// Length of the opcode at `p` with its argument, or `None` for STOP or an opcode a
/// binary snapshot pickle does not use.
fn step(d: &[u8], p: usize) -> Option<usize> {
    Some(match *d.get(p)? {
        // no argument
        b'}' | b']' | b'(' | b'e' | b'u' | b's' | b'a' | b')' | b'N' | 0x88 | 0x89 | b't'
        | 0x85 | 0x86 | 0x87 | 0x94 | b'0' | b'1' | b'2' | 0x8f | 0x90 => 1,
        // one-byte argument
        b'h' | b'q' | b'K' | 0x80 => 2,
        b'M' => 3,
        b'j' | b'r' | b'J' => 5,
        b'G' => 9,
        // FRAME: its length is a header, the opcodes inside are scanned
        0x95 => 9,
        0x8a | 0x8c | b'C' => 2 + *d.get(p + 1)? as usize,
        0x8b | b'X' | b'B' => 5 + u32_at(d, p + 1)?,
        0x8d | 0x8e | 0x96 => 9 + u64_at(d, p + 1)?,
        _ => return None,
    })
}

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: decode_scan FILE");
        std::process::exit(2);
    };
    let file = std::fs::File::open(&path).expect("open");
    let len = file.metadata().expect("metadata").len() as usize;
    // Mapped like leakscope maps it, so both read the page cache the same way.
    // SAFETY: a private read-only map of a file we hold open; checked for failure.
    let data = unsafe {
        let p = mmap(std::ptr::null_mut(), len, 1, 2, file.as_raw_fd(), 0);
        assert!(p as isize != -1, "mmap failed");
        std::slice::from_raw_parts(p, len)
    };
    let (mut p, mut ops, mut memo) = (0usize, 0u64, 0u64);
    while let Some(n) = step(data, p) {
        ops += 1;
        memo += (data[p] == 0x94) as u64;
        p += n;
    }
    match data.get(p) {
        Some(b'.') => println!("{ops} opcodes, {memo} MEMOIZE, STOP at byte {p}"),
        other => {
            eprintln!("stopped at byte {p} on {other:?}");
            std::process::exit(1);
        }
    }
}
