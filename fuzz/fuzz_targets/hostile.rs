//! Valid-but-hostile pickles against the loader's memory bound.
//!
//! The input is a program: each step is an opcode (from those that build, share, nest
//! and discard containers) and a repeat count, so a few bytes expand into megabytes of
//! pickle. The generator keeps a model of the stack (kinds, marks, memo size) and emits
//! only opcodes whose operands are there, so nearly every program is a valid pickle that
//! ends in a valid snapshot; what it builds on the way is thrown away, shared or kept.
//! A counting allocator measures the peak bytes the load allocates, which must stay
//! within the bound of docs/user-guide.md: 3 bytes per input byte plus 48 MiB (the
//! load's own answer, a snapshot or an error, does not matter).
#![no_main]
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use libfuzzer_sys::fuzz_target;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn note(delta: isize) {
    let v = LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
    PEAK.fetch_max(v, Ordering::Relaxed);
}

// SAFETY: every call goes to the system allocator unchanged; only counts are kept.
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

/// The bound under test (docs/user-guide.md, "Memory").
const PER_BYTE: usize = 3;
const FIXED: usize = 48 << 20;
/// Largest pickle a program may expand to (keeps one run under a second or so).
const MAX_PICKLE: usize = 24 << 20;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    List,
    Dict,
    Tuple,
    Scalar,
}

struct Gen {
    out: Vec<u8>,
    stack: Vec<Kind>,
    marks: Vec<usize>,
    memo: u32,
}

impl Gen {
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }
    fn above(&self) -> usize {
        self.stack.len() - self.floor()
    }
    fn push(&mut self, bytes: &[u8], k: Kind) {
        self.out.extend_from_slice(bytes);
        self.stack.push(k);
    }

    /// Emits opcode `op` if its operands are on the modelled stack.
    fn step(&mut self, op: u8, arg: u8) {
        let top = self.stack.last().copied();
        let below = |g: &Gen, n: usize| g.stack.len().checked_sub(n).and_then(|i| g.stack.get(i)).copied();
        match op % 20 {
            0 => self.push(b"]", Kind::List),
            1 => self.push(b"}", Kind::Dict),
            2 => self.push(b")", Kind::Tuple),
            3 => self.push(b"N", Kind::Scalar),
            4 => self.push(&[b'K', arg], Kind::Scalar),
            5 => self.push(&[0x8c, 1, b'a' + arg % 26], Kind::Scalar),
            6 if self.marks.len() < 64 => {
                self.out.push(b'(');
                self.marks.push(self.stack.len());
            }
            7 if self.above() > 0 => {
                self.out.push(b'0');
                self.stack.pop();
            }
            8 if !self.marks.is_empty() => {
                self.out.push(b'1');
                let m = self.marks.pop().unwrap_or(0);
                self.stack.truncate(m);
            }
            9 if self.above() > 0 => {
                self.out.push(b'2');
                self.stack.push(top.unwrap_or(Kind::Scalar));
            }
            10 if self.above() >= 2 && below(self, 2) == Some(Kind::List) => {
                self.out.push(b'a');
                self.stack.pop();
            }
            11 if self.marks.last().is_some_and(|&m| m > 0 && self.stack[m - 1] == Kind::List) => {
                self.out.push(b'e');
                let m = self.marks.pop().unwrap_or(0);
                self.stack.truncate(m);
            }
            12 if self.above() >= 3 && below(self, 3) == Some(Kind::Dict) && below(self, 2) == Some(Kind::Scalar) => {
                self.out.push(b's');
                self.stack.truncate(self.stack.len() - 2);
            }
            13 if !self.marks.is_empty() => {
                self.out.push(b't');
                let m = self.marks.pop().unwrap_or(0);
                self.stack.truncate(m);
                self.stack.push(Kind::Tuple);
            }
            14 if self.above() >= 2 => {
                self.out.push(0x86);
                self.stack.truncate(self.stack.len() - 2);
                self.stack.push(Kind::Tuple);
            }
            15 if !self.marks.is_empty() => {
                self.out.push(b'l');
                let m = self.marks.pop().unwrap_or(0);
                self.stack.truncate(m);
                self.stack.push(Kind::List);
            }
            16 if !self.marks.is_empty() && self.above() % 2 == 0 => {
                self.out.push(b'd');
                let m = self.marks.pop().unwrap_or(0);
                self.stack.truncate(m);
                self.stack.push(Kind::Dict);
            }
            17 if self.above() > 0 => {
                self.out.push(0x94);
                self.memo += 1;
            }
            18 if self.memo > 0 => {
                let i = (arg as u32 * 2654435761) % self.memo;
                self.out.push(b'j');
                self.out.extend_from_slice(&i.to_le_bytes());
                // Its kind is unknown here: shared containers are what it is for.
                self.stack.push(Kind::Tuple);
            }
            19 => {
                let n = (arg as usize + 1) * 4096;
                self.out.push(b'X');
                self.out.extend_from_slice(&(n as u32).to_le_bytes());
                self.out.extend(std::iter::repeat_n(b'x', n));
                self.stack.push(Kind::Scalar);
            }
            _ => {}
        }
    }

    /// Closes every MARK, drops what is left and ends with a valid snapshot.
    fn finish(mut self) -> Vec<u8> {
        while let Some(m) = self.marks.pop() {
            self.out.push(b'1');
            self.stack.truncate(m);
        }
        for _ in 0..self.stack.len() {
            self.out.push(b'0');
        }
        self.out.extend_from_slice(b"}\x8c\x08segments]s.");
        self.out
    }
}

fuzz_target!(|data: &[u8]| {
    let mut g = Gen {
        out: b"\x80\x04".to_vec(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: 0,
    };
    for step in data.chunks_exact(3) {
        let repeat = 1 + (step[1] as usize).pow(2);
        for _ in 0..repeat {
            if g.out.len() >= MAX_PICKLE {
                break;
            }
            g.step(step[0], step[2]);
        }
    }
    let pickle = g.finish();
    let mut opts = leakscope::LoadOptions::default();
    opts.threads = false;
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let result = leakscope::load_bytes(&pickle, opts);
    drop(result);
    let peak = (PEAK.load(Ordering::Relaxed) - base).max(0) as usize;
    let bound = PER_BYTE * pickle.len() + FIXED;
    assert!(
        peak <= bound,
        "{} pickle bytes, {peak} bytes held at the peak (bound {bound})",
        pickle.len()
    );
});
