//! The reader's shortcuts must not change what a file means: a frames list is recognised
//! by its bytes only while the memo slots those bytes name are unchanged, and a trace
//! entry the general path decoded keeps its place among the entries around it. Files are
//! written opcode by opcode (protocol 4, MEMOIZE as CPython writes it); the expected
//! frames and order follow from the bytes by hand.

use crate::common::*;

/// Writes a protocol-4 pickle and numbers memo slots as MEMOIZE does.
struct W {
    out: Vec<u8>,
    memo: u8,
}

impl W {
    fn new() -> W {
        W {
            out: vec![0x80, 4],
            memo: 0,
        }
    }
    fn op(&mut self, b: &[u8]) -> &mut W {
        self.out.extend_from_slice(b);
        self
    }
    /// MEMOIZE; returns the slot.
    fn m(&mut self) -> u8 {
        self.out.push(0x94);
        self.memo += 1;
        self.memo - 1
    }
    /// A new memoized short string; returns its slot.
    fn s(&mut self, t: &str) -> u8 {
        self.out.push(0x8c);
        self.out.push(t.len() as u8);
        self.out.extend_from_slice(t.as_bytes());
        self.m()
    }
    fn get(&mut self, slot: u8) -> &mut W {
        self.op(&[b'h', slot])
    }
    fn int(&mut self, v: u32) -> &mut W {
        self.out.push(b'J');
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A new frame dict (keys already in the memo); returns its slot.
    fn frame(&mut self, keys: &Keys, name: &str) -> u8 {
        self.op(b"}");
        let slot = self.m();
        self.op(b"(").get(keys.filename);
        self.s("train.py");
        self.get(keys.line).int(7).get(keys.name);
        self.s(name);
        self.op(b"u");
        slot
    }
    /// A trace entry on the fast path's shape: every key a memo reference, frames a new
    /// list of memo references to frames.
    fn entry(&mut self, keys: &Keys, alloc: u8, addr: u32, time: u32, frames: &[u8]) {
        self.op(b"}");
        self.m();
        self.op(b"(").get(keys.action).get(alloc);
        self.get(keys.addr).int(addr).get(keys.size).int(512);
        self.get(keys.stream).int(0).get(keys.time).int(time);
        self.get(keys.frames).op(b"]");
        self.m();
        self.op(b"(");
        for &f in frames {
            self.get(f);
        }
        self.op(b"e").op(b"u");
    }
}

struct Keys {
    action: u8,
    addr: u8,
    size: u8,
    stream: u8,
    time: u8,
    frames: u8,
    filename: u8,
    line: u8,
    name: u8,
}

/// The top dict up to the trace list's first MARK, with every key string memoized.
fn start(w: &mut W) -> (Keys, u8) {
    w.op(b"}");
    w.m();
    w.op(b"(");
    w.s("segments");
    w.op(b"]");
    w.m();
    w.s("device_traces");
    w.op(b"]");
    w.m();
    w.op(b"(").op(b"]");
    w.m();
    w.op(b"(");
    // Key strings, pushed and popped so that later entries can refer to them.
    let mut key = |t: &str| {
        let k = w.s(t);
        w.op(b"0");
        k
    };
    let keys = Keys {
        action: key("action"),
        addr: key("addr"),
        size: key("size"),
        stream: key("stream"),
        time: key("time_us"),
        frames: key("frames"),
        filename: key("filename"),
        line: key("line"),
        name: key("name"),
    };
    let alloc = w.s("alloc");
    w.op(b"0");
    (keys, alloc)
}

/// Closes the trace list, the device list and the top dict.
fn finish(w: &mut W) -> Vec<u8> {
    w.op(b"e").op(b"e").op(b"u").op(b".");
    w.out.clone()
}

/// Innermost frame name and address of each entry of device 0.
fn entries(bytes: &[u8]) -> Vec<(String, u64)> {
    let snap = try_load(bytes).expect("loads");
    let t = snap.trace(0);
    (0..t.len())
        .map(|i| {
            let frames = snap.stacks.get(t.stack[i]);
            let f = snap.frames.get(frames[0]);
            (snap.strings.get(f.name).to_string(), t.addr[i])
        })
        .collect()
}

/// A file whose trace the reader already knows as one (a first batch closed), a second
/// batch open with one entry in it; every entry's stack is the frame `name`.
fn known_trace(name: &str) -> (W, Keys, u8, u8) {
    let mut w = W::new();
    let (keys, alloc) = start(&mut w);
    let frame = w.frame(&keys, name);
    w.op(b"0");
    w.entry(&keys, alloc, 0x1000, 1, &[frame]);
    w.op(b"e").op(b"(");
    w.entry(&keys, alloc, 0x2000, 2, &[frame]);
    (w, keys, alloc, frame)
}

#[test]
fn a_memo_slot_overwritten_by_put_changes_the_frames_list_with_the_same_bytes() {
    let (mut w, keys, alloc, first) = known_trace("first");
    // Overwrite the frame's slot with another frame dict (BINPUT), then drop it.
    w.frame(&keys, "second");
    w.op(&[b'q', first]).op(b"0");
    w.entry(&keys, alloc, 0x3000, 3, &[first]);
    let bytes = finish(&mut w);
    assert_eq!(
        entries(&bytes),
        vec![
            ("first".to_string(), 0x1000),
            ("first".to_string(), 0x2000),
            ("second".to_string(), 0x3000),
        ]
    );
}

#[test]
fn an_entry_the_general_path_decodes_keeps_its_place_in_the_batch() {
    let (mut w, keys, alloc, f) = known_trace("step");
    // An entry with its key written inline (not a memo reference): the fast path
    // declines it and the general path builds it as a dict.
    w.op(b"}");
    w.m();
    w.op(b"(");
    w.s("action");
    w.get(alloc);
    w.get(keys.addr).int(0x3000).get(keys.size).int(512);
    w.get(keys.stream).int(0).get(keys.time).int(3);
    w.get(keys.frames).op(b"]");
    w.m();
    w.op(b"(").get(f).op(b"e").op(b"u");
    w.entry(&keys, alloc, 0x4000, 4, &[f]);
    w.entry(&keys, alloc, 0x5000, 5, &[f]);
    let bytes = finish(&mut w);
    let addrs: Vec<u64> = entries(&bytes).into_iter().map(|(_, a)| a).collect();
    assert_eq!(addrs, vec![0x1000, 0x2000, 0x3000, 0x4000, 0x5000]);
}
