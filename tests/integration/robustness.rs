//! Bad input: truncated and corrupted files, crafted attacks on memory and on the
//! reader. Every case must end in a clear error (or a clean load), never a panic or hang.

use std::process::Command;

use crate::common::*;

#[test]
fn truncation_at_every_offset_is_an_error() {
    for name in [
        "tiny_protocol4.pickle",
        "tiny_protocol0.pickle",
        "tiny_cpp_pickler.pickle",
        "tiny.json",
    ] {
        let data = std::fs::read(fixture(&format!("encodings/{name}"))).unwrap();
        for cut in 0..data.len() {
            match try_load(&data[..cut]) {
                Ok(_) => panic!("{name} cut at {cut} loaded"),
                Err(e) if e == "PANIC" => panic!("{name} cut at {cut} panicked"),
                Err(_) => {}
            }
        }
    }
}

#[test]
fn truncation_errors_name_the_offset() {
    let data = std::fs::read(fixture("encodings/tiny_protocol4.pickle")).unwrap();
    let e = err_of(&data[..1000]);
    assert!(e.contains("the data ends at byte 1000"), "{e}");
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn flipped_bytes_never_panic() {
    for name in [
        "tiny_protocol4.pickle",
        "tiny_cpp_pickler.pickle",
        "tiny_protocol0.pickle",
    ] {
        let data = std::fs::read(fixture(&format!("encodings/{name}"))).unwrap();
        let mut ok = 0;
        let mut errors = 0;
        for i in 0..data.len() {
            for mask in [0xffu8, 0x01, 0x80] {
                let mut d = data.clone();
                d[i] ^= mask;
                match try_load(&d) {
                    Ok(_) => ok += 1,
                    Err(e) if e == "PANIC" => {
                        panic!("{name}: flipping byte {i} with {mask:#x} panicked")
                    }
                    Err(e) => {
                        assert!(!e.is_empty());
                        errors += 1;
                    }
                }
            }
        }
        // Both outcomes must occur: flips in numbers load, flips in opcodes fail.
        assert!(ok > 0 && errors > 0, "{name}: ok {ok}, errors {errors}");
    }
}

#[test]
fn cli_exits_2_on_truncated_files() {
    let data = std::fs::read(fixture("encodings/tiny_protocol4.pickle")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for cut in (0..data.len()).step_by(97) {
        let p = dir.path().join(format!("cut{cut}.pickle"));
        std::fs::write(&p, &data[..cut]).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_leakscope"))
            .arg("summary")
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "cut at {cut}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("cut{cut}.pickle")), "{err}");
        if cut > 0 {
            assert!(err.contains("byte"), "no offset in: {err}");
        }
    }
}

#[test]
fn huge_string_claims_are_refused_without_allocating() {
    // BINUNICODE8 claiming 4 GiB, BINUNICODE claiming 4 GiB - 1, BINBYTES8 claiming 2^60.
    let mut a = b"\x80\x04\x8d".to_vec();
    a.extend_from_slice(&(4u64 << 30).to_le_bytes());
    a.extend_from_slice(b"abc.");
    let mut b = b"\x80\x04X".to_vec();
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.extend_from_slice(b"abc.");
    let mut c = b"\x80\x04\x8e".to_vec();
    c.extend_from_slice(&(1u64 << 60).to_le_bytes());
    for (i, bytes) in [a, b, c].iter().enumerate() {
        let e = err_of(bytes);
        assert!(e.contains("truncated"), "case {i}: {e}");
    }
}

#[test]
fn memo_indices_out_of_range_are_refused() {
    let e = err_of(b"\x80\x04]h\x05.");
    assert!(e.contains("memo index 5 out of range"), "{e}");
    let e = err_of(b"\x80\x04]j\xff\xff\xff\x00.");
    assert!(e.contains("out of range"), "{e}");
    // A PUT far beyond the memo would make a dense memo allocate gigabytes.
    let e = err_of(b"\x80\x02]r\xff\xff\xff\x7f.");
    assert!(e.contains("far beyond"), "{e}");
}

#[test]
fn deep_nesting_gets_a_clear_error() {
    // 100 000 nested lists with MARK/APPENDS ...
    let n = 100_000;
    let mut d = b"\x80\x04".to_vec();
    for _ in 0..n {
        d.extend_from_slice(b"](");
    }
    d.push(b']');
    d.extend(std::iter::repeat_n(b'e', n));
    d.push(b'.');
    let e = err_of(&d);
    assert!(e.contains("expected a dict"), "{e}");
    // ... and one million with APPEND, no MARK at all: a million live lists are 48 bytes
    // each (slot and stack handle) from two input bytes, past the loader's memory bound
    // (3 bytes per byte read plus 48 MiB) at about the 1.3 millionth byte.
    let n = 1_000_000;
    let mut d = b"\x80\x04".to_vec();
    d.extend(std::iter::repeat_n(b']', n));
    d.extend(std::iter::repeat_n(b'a', n - 1));
    d.push(b'.');
    let e = err_of(&d);
    assert!(
        e.contains("expected a dict") || e.contains("more data than any memory snapshot holds"),
        "{e}"
    );
    // Deep nesting inside a key leakscope keeps as data.
    let mut d = b"\x80\x04}\x8c\x01x".to_vec();
    d.extend(std::iter::repeat_n(b']', 1000));
    d.extend(std::iter::repeat_n(b'a', 999));
    d.extend_from_slice(b"s.");
    let e = err_of(&d);
    assert!(e.contains("nesting deeper than"), "{e}");
}

#[test]
fn self_reference_and_exponential_sharing_are_refused() {
    // {"x": l} where l contains itself.
    let e = err_of(b"\x80\x04}\x8c\x01x]\x94h\x00as.");
    assert!(
        e.contains("contains itself") || e.contains("nesting"),
        "{e}"
    );
    // {"x": l60} with l(k+1) = [lk, lk]: 2^60 nodes if expanded. Each level is built,
    // memoized and popped, so only the last one is pushed back for SETITEM.
    let mut d = b"\x80\x04}\x8c\x01x]\x940".to_vec();
    for i in 0..60u32 {
        d.extend_from_slice(b"](j");
        d.extend_from_slice(&i.to_le_bytes());
        d.push(b'j');
        d.extend_from_slice(&i.to_le_bytes());
        d.extend_from_slice(b"e\x940");
    }
    d.push(b'j');
    d.extend_from_slice(&60u32.to_le_bytes());
    d.extend_from_slice(b"s.");
    let e = err_of(&d);
    assert!(e.contains("expand"), "{e}");
}

#[test]
fn code_opcodes_are_never_run() {
    let cases: &[(&[u8], &str, usize)] = &[
        (b"\x80\x02cos\nsystem\n\x8c\x02id\x85R.", "GLOBAL", 2),
        (b"\x80\x04\x8c\x02os\x8c\x06system\x93.", "STACK_GLOBAL", 14),
        (b"\x80\x04N)R.", "REDUCE", 4),
        (b"\x80\x04}}b.", "BUILD", 4),
        (b"\x80\x04N)\x81.", "NEWOBJ", 4),
        (b"\x80\x04(ios\nsystem\n.", "INST", 3),
        (b"\x80\x04(o.", "OBJ", 3),
        (b"\x80\x04Pabc\n.", "PERSID", 2),
        (b"\x80\x04NQ.", "BINPERSID", 3),
        (b"\x80\x04\x82\x01.", "EXT1", 2),
    ];
    for (bytes, name, offset) in cases {
        let e = err_of(bytes);
        assert!(
            e.contains(&format!(
                "not a plain snapshot: opcode {name} at byte {offset}"
            )),
            "{name}: {e}"
        );
    }
}

#[test]
fn wrong_shapes_get_schema_errors() {
    // A string at the top.
    let e = err_of(b"\x80\x04\x8c\x01x.");
    assert!(e.contains("expected a dict (or a list of segments)"), "{e}");
    // A trace entry whose size is negative.
    let e = err_of(b"\x80\x04}(\x8c\x0ddevice_traces]](}(\x8c\x06action\x8c\x05alloc\x8c\x04addrK\x01\x8c\x04sizeJ\xfb\xff\xff\xffueeu.");
    assert!(e.contains("sizes cannot be negative"), "{e}");
    assert!(e.contains("trace entry 0"), "{e}");
    // An action that is an int.
    let e = err_of(b"\x80\x04}(\x8c\x0ddevice_traces]](}(\x8c\x06actionK\x01ueeu.");
    assert!(e.contains("`action` must be a string"), "{e}");
    // Empty input and plain text.
    assert!(err_of(b"").contains("empty"));
    assert!(err_of(b"hello").contains("not a memory snapshot"));
}

/// Lengths CPython reads as signed (LONG4, BINSTRING) are refused when negative, naming
/// the opcode's byte, not reported as a truncated file.
#[test]
fn negative_lengths_are_named() {
    let e = err_of(b"\x80\x02\x8b\xff\xff\xff\xff.");
    assert!(
        e.contains("LONG4 with a negative length (-1)") && e.contains("byte 2"),
        "{e}"
    );
    let e = err_of(b"\x80\x02T\x00\x00\x00\x80.");
    assert!(
        e.contains("BINSTRING with a negative length") && !e.contains("truncated"),
        "{e}"
    );
}

/// A JSON frame line of 1e308 is a number too large for a line, and JSON has no byte
/// offsets to give (it gave the largest 64-bit number as one).
#[test]
fn a_json_line_too_large_is_named_without_a_bogus_offset() {
    let j = br#"{"segments":[],"device_traces":[[{"action":"alloc","addr":1,"size":512,"frames":[{"filename":"a.py","name":"f","line":1e308}]}]]}"#;
    let e = err_of(j);
    assert!(e.contains("too large for a line number"), "{e}");
    assert!(!e.contains("18446744073709551615"), "{e}");
}
