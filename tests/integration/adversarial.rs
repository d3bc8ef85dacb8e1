//! Hostile and broken snapshots, built opcode by opcode: wrong types in every trace field,
//! missing and duplicated keys, NaN and huge integers, allocator histories that cannot
//! happen (a second alloc at a live address, a block freed twice, time running backwards).
//! Each must give a clear error naming the place, or load with a warning and counts,
//! never a panic and never a silent drop. Expected counts are worked out by hand from the
//! events written here.

use crate::common::*;

/// A pickled value, written as CPython's protocol 4 writes it (without memoization).
#[derive(Clone, Debug)]
enum P {
    None,
    Bool(bool),
    Int(i64),
    /// LONG1 with these little-endian two's-complement bytes.
    Long(Vec<u8>),
    Float(f64),
    Str(String),
    List(Vec<P>),
    Dict(Vec<(P, P)>),
}

fn s(v: &str) -> P {
    P::Str(v.to_string())
}

fn enc(p: &P, out: &mut Vec<u8>) {
    match p {
        P::None => out.push(b'N'),
        P::Bool(true) => out.push(0x88),
        P::Bool(false) => out.push(0x89),
        P::Int(i) => {
            out.push(0x8a);
            let b = i.to_le_bytes();
            out.push(8);
            out.extend_from_slice(&b);
        }
        P::Long(bytes) => {
            out.push(0x8a);
            out.push(bytes.len() as u8);
            out.extend_from_slice(bytes);
        }
        P::Float(f) => {
            out.push(b'G');
            out.extend_from_slice(&f.to_be_bytes());
        }
        P::Str(t) => {
            out.push(b'X');
            out.extend_from_slice(&(t.len() as u32).to_le_bytes());
            out.extend_from_slice(t.as_bytes());
        }
        P::List(items) => {
            out.push(b']');
            if !items.is_empty() {
                out.push(b'(');
                for i in items {
                    enc(i, out);
                }
                out.push(b'e');
            }
        }
        P::Dict(items) => {
            out.push(b'}');
            if !items.is_empty() {
                out.push(b'(');
                for (k, v) in items {
                    enc(k, out);
                    enc(v, out);
                }
                out.push(b'u');
            }
        }
    }
}

fn pickle(top: &P) -> Vec<u8> {
    let mut out = vec![0x80, 4];
    enc(top, &mut out);
    out.push(b'.');
    out
}

fn frame() -> P {
    P::Dict(vec![
        (s("filename"), s("train.py")),
        (s("line"), P::Int(7)),
        (s("name"), s("step")),
    ])
}

/// A well-formed trace entry.
fn ev(action: &str, addr: i64, size: i64, time: i64) -> Vec<(P, P)> {
    vec![
        (s("action"), s(action)),
        (s("addr"), P::Int(addr)),
        (s("size"), P::Int(size)),
        (s("stream"), P::Int(0)),
        (s("time_us"), P::Int(time)),
        (s("frames"), P::List(vec![frame()])),
    ]
}

/// A snapshot of one device with no segments and these trace entries.
fn snapshot(events: Vec<Vec<(P, P)>>) -> Vec<u8> {
    pickle(&P::Dict(vec![
        (s("segments"), P::List(vec![])),
        (
            s("device_traces"),
            P::List(vec![P::List(events.into_iter().map(P::Dict).collect())]),
        ),
    ]))
}

/// Replaces (or removes, with `None`) key `key` of an entry.
fn with(mut e: Vec<(P, P)>, key: &str, v: Option<P>) -> Vec<(P, P)> {
    e.retain(|(k, _)| !matches!(k, P::Str(x) if x == key));
    if let Some(v) = v {
        e.push((s(key), v));
    }
    e
}

/// Whether a summary's warnings mention `needle`.
fn warned(j: &serde_json::Value, needle: &str) -> bool {
    j["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .any(|w| w.as_str().is_some_and(|w| w.contains(needle)))
}

fn summary(bytes: &[u8]) -> serde_json::Value {
    let snap = try_load(bytes).expect("loads");
    serde_json::to_value(leakscope::analysis::summary::summarize(&snap, "t")).expect("json")
}

/// The second entry of a three-event trace carries the bad field; the error must say so.
#[test]
fn wrong_types_in_every_trace_field_are_errors_naming_the_entry() {
    let good = || ev("alloc", 4096, 512, 10);
    let cases: Vec<(&str, P, &str)> = vec![
        ("action", P::Int(1), "`action` must be a string"),
        ("action", P::None, "`action`"),
        ("addr", s("0x1000"), "addr"),
        ("addr", P::Float(4096.0), "addr"),
        ("size", P::Int(-512), "sizes cannot be negative"),
        ("size", s("512"), "size"),
        ("size", P::Float(f64::NAN), "size"),
        ("stream", s("default"), "stream"),
        ("time_us", P::Float(f64::NAN), "time_us"),
        ("time_us", s("yesterday"), "time_us"),
        ("frames", P::Dict(vec![(s("a"), P::Int(1))]), "frames"),
        ("frames", P::Int(3), "frames"),
        ("frames", P::List(vec![P::Int(3)]), "frame"),
        // 2^64 and -2^65 do not fit the 64-bit columns.
        ("size", P::Long(vec![0, 0, 0, 0, 0, 0, 0, 0, 1]), "size"),
        (
            "addr",
            P::Long(vec![0, 0, 0, 0, 0, 0, 0, 0, 0xfe]),
            "address",
        ),
    ];
    for (field, value, want) in cases {
        let bad = with(ev("alloc", 8192, 512, 11), field, Some(value.clone()));
        let bytes = snapshot(vec![good(), bad, good()]);
        let e = err_of(&bytes);
        assert!(e.contains(want), "{field} = {value:?}: {e}");
        assert!(
            e.contains("trace entry 1"),
            "{field} = {value:?}: the error should name entry 1: {e}"
        );
    }
}

#[test]
fn missing_keys_are_errors_or_counted() {
    // No action: nothing can be done with the entry.
    let e = err_of(&snapshot(vec![with(ev("alloc", 1, 2, 3), "action", None)]));
    assert!(
        e.contains("`action`") && e.contains("device_traces[0][0]"),
        "{e}"
    );
    // No address on an alloc: loaded, but the summary says how many entries the replay
    // could not place.
    let j = summary(&snapshot(vec![
        with(ev("alloc", 4096, 512, 1), "addr", None),
        ev("alloc", 8192, 512, 2),
    ]));
    assert_eq!(j["trace"]["events_without_address"], 1, "{j:#}");
    assert!(warned(&j, "without an address"), "{j:#}");
    // No size, no stream, no time, no frames: all optional in real files.
    let j = summary(&snapshot(vec![vec![
        (s("action"), s("alloc")),
        (s("addr"), P::Int(4096)),
    ]]));
    assert_eq!(j["totals"]["trace_events"], 1);
    // A top level with neither segments nor traces is not a snapshot.
    let e = err_of(&pickle(&P::Dict(vec![(s("model"), s("resnet"))])));
    assert!(e.contains("neither `segments` nor `device_traces`"), "{e}");
}

#[test]
fn duplicated_keys_keep_the_last_value_as_python_does() {
    // In a trace entry: CPython's dict keeps the last `size`.
    let mut e = ev("alloc", 4096, 100, 1);
    e.push((s("size"), P::Int(300)));
    let bytes = snapshot(vec![e, ev("free_completed", 4096, 300, 2)]);
    let snap = try_load(&bytes).expect("loads");
    let t = &snap.device_traces.as_ref().unwrap()[0];
    assert_eq!(t.size[0], 300);
    // At the top: two `device_traces`; the last one counts and a warning says so.
    let top = P::Dict(vec![
        (s("segments"), P::List(vec![])),
        (
            s("device_traces"),
            P::List(vec![P::List(vec![P::Dict(ev("alloc", 1, 1, 1))])]),
        ),
        (
            s("device_traces"),
            P::List(vec![P::List(vec![
                P::Dict(ev("alloc", 4096, 8, 1)),
                P::Dict(ev("alloc", 8192, 8, 2)),
            ])]),
        ),
    ]);
    let j = summary(&pickle(&top));
    assert_eq!(j["totals"]["trace_events"], 2, "{j:#}");
    assert!(warned(&j, "device_traces"), "{j:#}");
}

#[test]
fn nan_and_wide_numbers_outside_the_trace_do_not_stop_the_load() {
    let top = P::Dict(vec![
        (s("segments"), P::List(vec![])),
        (
            s("device_traces"),
            P::List(vec![P::List(vec![P::Dict(ev("alloc", 4096, 8, 1))])]),
        ),
        (
            s("allocator_settings"),
            P::Dict(vec![
                (s("garbage_collection_threshold"), P::Float(f64::NAN)),
                (s("max_split_size"), P::Long(vec![0x01; 12])),
                (s("expandable_segments"), P::Bool(false)),
            ]),
        ),
    ]);
    let j = summary(&pickle(&top));
    assert_eq!(j["totals"]["trace_events"], 1);
}

/// Integers wider than 128 bits have no place in a snapshot: refused where they are read,
/// with the byte offset, whatever field they sit in.
#[test]
fn integers_wider_than_any_field_are_errors_with_the_offset() {
    let top = P::Dict(vec![
        (s("segments"), P::List(vec![])),
        (
            s("allocator_settings"),
            P::Dict(vec![(s("max_split_size"), P::Long(vec![0xff; 40]))]),
        ),
    ]);
    let e = err_of(&pickle(&top));
    assert!(e.contains("too large") && e.contains("byte"), "{e}");
}

/// Histories an allocator cannot produce: each is counted, and the rest is analysed.
#[test]
fn impossible_histories_are_counted_and_reported() {
    let bytes = snapshot(vec![
        ev("alloc", 4096, 100, 10),          // 0
        ev("alloc", 4096, 200, 11),          // 1: again at a live address
        ev("free_requested", 4096, 200, 12), // 2
        ev("free_completed", 4096, 200, 13), // 3
        ev("free_completed", 4096, 200, 14), // 4: freed twice
        ev("alloc", 8192, 50, 9),            // 5: time runs backwards (14 -> 9)
        ev("alloc", 12288, 70, 15),          // 6
        ev("alloc", 16384, 30, 12),          // 7: backwards again (15 -> 12)
    ]);
    let j = summary(&bytes);
    let t = &j["trace"];
    assert_eq!(t["double_allocs"], 1, "{j:#}");
    assert_eq!(t["unmatched_frees"], 1, "{j:#}");
    assert_eq!(t["time_reversals"], 2, "{j:#}");
    for needle in ["already live", "time_us", "no earlier allocation"] {
        assert!(warned(&j, needle), "{needle}: {:#}", j["warnings"]);
    }
    // The analyses still run on the rest: live bytes at the end are 50 + 70 + 30. The
    // second free of 4096 frees an allocation the trace did not show, and the address was
    // held by the traced one until event 3: that allocation began after event 3 and ended
    // at event 4, so it is never live after any event (an address holds one allocation
    // at a time), and nothing is live before the first event.
    let snap = try_load(&bytes).unwrap();
    let dev = &snap.devices()[0];
    let rep = leakscope::replay::replay(dev);
    assert_eq!(rep.requested_after(Some(7)), 150);
    assert_eq!(rep.initial_requested, 0);
    assert_eq!(rep.requested_after(Some(0)), 100);
    assert_eq!(
        rep.requested_after(Some(1)),
        200,
        "the alloc at a live address ends the first"
    );
    assert_eq!(rep.requested_after(Some(3)), 0);
    assert_eq!(rep.requested_after(Some(4)), 0);
    assert_eq!(rep.double_allocs, 1);
}

/// A list that contains itself, built with memo opcodes (MEMOIZE then BINGET inside).
#[test]
fn memo_cycles_are_errors() {
    // ] MEMOIZE ( h\x00 e .  : a list appended to itself
    let e = err_of(b"\x80\x04]\x94(h\x00e.");
    assert!(!e.is_empty());
    // A dict whose value is itself, under `device_traces`.
    let e = err_of(b"\x80\x04}\x94(\x8c\x0ddevice_traces\x94h\x00u.");
    assert!(e.contains("device_traces") || e.contains("itself"), "{e}");
}

/// Lengths larger than the file, for every length-prefixed opcode.
#[test]
fn lengths_past_the_end_are_errors_with_the_offset() {
    let cases: &[&[u8]] = &[
        b"\x80\x04X\xff\xff\xff\x7fab",                    // BINUNICODE
        b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7fab", // BINUNICODE8
        b"\x80\x04\x8c\xffab",                             // SHORT_BINUNICODE
        b"\x80\x04B\xff\xff\xff\x7fab",                    // BINBYTES
        b"\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\x7fab", // BINBYTES8
        b"\x80\x04\x8b\xff\xff\xff\x7f\x01",               // LONG4
        b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f]",  // FRAME
    ];
    for c in cases {
        let e = err_of(c);
        assert!(e.contains("byte"), "{c:?}: {e}");
    }
}
