//! Compressed input: gzip and zstd (several members or frames, with and without a declared
//! size) give what the plain file gives; truncated and corrupt streams, inputs over the
//! limit and decompression bombs are refused with exit code 2, at once and in little
//! memory. The bombs are made here, never committed.

use std::io::Write;

use leakscope::LoadOptions;
use leakscope::error::LoadErrorKind;

use crate::common::*;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

/// A zstd frame without a declared content size (as a stream writes it).
fn zstd_stream(data: &[u8]) -> Vec<u8> {
    let mut z = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    z.include_contentsize(false).unwrap();
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

/// A zstd frame that declares its content size (as `zstd FILE` writes it).
fn zstd_sized(data: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(data, 3).unwrap()
}

fn summary_of(bytes: &[u8]) -> serde_json::Value {
    let snap = leakscope::load_bytes(bytes, LoadOptions::default()).unwrap();
    content_only(summary_json(&snap, ""))
}

#[test]
fn every_compression_gives_the_plain_files_summary() {
    for name in [
        "encodings/tiny_protocol4.pickle",
        "encodings/tiny_protocol0.pickle",
        "encodings/tiny.json",
        "scenarios/pp_last_stage_recv_pinned.pickle",
    ] {
        let raw = std::fs::read(fixture(name)).unwrap();
        let reference = summary_of(&raw);
        let half = raw.len() / 2;
        let forms = [
            ("gzip", gzip(&raw)),
            ("gzip", [gzip(&raw[..half]), gzip(&raw[half..])].concat()),
            ("zstd", zstd_stream(&raw)),
            ("zstd", zstd_sized(&raw)),
            (
                "zstd",
                [zstd_sized(&raw[..half]), zstd_stream(&raw[half..])].concat(),
            ),
        ];
        for (i, (codec, bytes)) in forms.iter().enumerate() {
            let snap = leakscope::load_bytes(bytes, LoadOptions::default())
                .unwrap_or_else(|e| panic!("{name} form {i}: {e}"));
            assert_eq!(snap.format.compression.as_str(), *codec, "{name} form {i}");
            assert_eq!(
                content_only(summary_json(&snap, "")),
                reference,
                "{name} form {i}"
            );
        }
    }
}

#[test]
fn compression_is_detected_by_content_not_name() {
    let raw = std::fs::read(fixture("encodings/tiny_protocol4.pickle")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes, codec) in [
        ("a.json", gzip(&raw), "gzip"),
        ("b.pickle", zstd_stream(&raw), "zstd"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        assert_eq!(load(&p).format.compression.as_str(), codec);
    }
}

/// The pickle header the bombs start with: PROTO 4, then an empty FRAME (9 bytes), so the
/// first byte after it, at offset 11, is the first of the zeros.
const BOMB_HEAD: &[u8] = b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00";

/// `members` copies of a member holding `zeros` zero bytes, the first one behind the
/// pickle header. Identical members make a bomb of gigabytes cheap to build.
fn bomb(codec: &str, zeros: usize, members: usize) -> Vec<u8> {
    let mut head = BOMB_HEAD.to_vec();
    head.resize(BOMB_HEAD.len() + zeros, 0);
    let body = vec![0u8; zeros];
    let (first, rest) = match codec {
        "gzip" => (gzip(&head), gzip(&body)),
        _ => (zstd_stream(&head), zstd_stream(&body)),
    };
    let mut out = first;
    for _ in 1..members {
        out.extend_from_slice(&rest);
    }
    out
}

/// Runs the binary with `LEAKSCOPE_TIMINGS=1` and returns its exit code, stderr and the
/// peak RSS in KiB it reports (its own `VmHWM`: `getrusage` on a child started with
/// vfork counts the parent's memory as well).
#[cfg(target_os = "linux")]
fn run_measured(args: &[&str]) -> (i32, String, u64) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .args(args)
        .env("NO_COLOR", "1")
        .env("LEAKSCOPE_TIMINGS", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let rss = err
        .split("peak RSS ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in {err}"));
    (out.status.code().unwrap_or(-1), err, rss)
}

/// A pickle header and then gigabytes of zeros: refused at byte 11, where the first zero
/// is, having decompressed a few MiB, not the gigabytes.
#[cfg(target_os = "linux")]
#[test]
fn decompression_bombs_stop_at_the_first_bad_byte() {
    let dir = tempfile::tempdir().unwrap();
    // 2 GiB of zeros as zstd, 4 GiB as gzip (64 MiB members).
    for (codec, members, name) in [("zstd", 32, "bomb.zst"), ("gzip", 64, "bomb.gz")] {
        let bytes = bomb(codec, 64 << 20, members);
        assert!(bytes.len() < 8 << 20, "{codec}: {} bytes", bytes.len());
        let p = dir.path().join(name);
        std::fs::write(&p, &bytes).unwrap();
        let (code, err, rss_kib) = run_measured(&["summary", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{codec}: {err}");
        assert!(
            err.contains("invalid pickle opcode 0x00 at byte 11")
                && err.contains(&format!("{codec}-decompressed")),
            "{codec}: {err}"
        );
        assert!(rss_kib < 64 * 1024, "{codec}: peak RSS {rss_kib} KiB");

        // The library's typed error says the same.
        match leakscope::load_bytes(&bytes, LoadOptions::default()).map_err(|e| e.kind) {
            Err(LoadErrorKind::InDecompressed { inner, .. }) => match *inner {
                LoadErrorKind::BadOpcode { offset, opcode } => {
                    assert_eq!((offset, opcode), (11, 0), "{codec}");
                }
                other => panic!("{codec}: {other}"),
            },
            other => panic!("{codec}: {other:?}"),
        }
    }
}

/// Over the limit: exit 2 naming the limit and the option; with the option raised the
/// file loads. A zstd frame that declares its size is refused before decoding.
#[test]
fn input_over_the_limit_is_refused_and_the_option_raises_it() {
    let raw = std::fs::read(fixture("scenarios/pp_last_stage_recv_pinned.pickle")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let small = (raw.len() / 2).to_string();
    let enough = raw.len().to_string();
    for (name, bytes) in [
        ("s.pickle.gz", gzip(&raw)),
        ("s.pickle.zst", zstd_stream(&raw)),
        ("sized.pickle.zst", zstd_sized(&raw)),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let path = p.to_str().unwrap();
        let (code, _, err) = run_cli(&["summary", path, "--max-decompressed-bytes", &small]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(
            err.contains(&format!("limit of {small} bytes"))
                && err.contains("--max-decompressed-bytes"),
            "{name}: {err}"
        );
        let (code, out, err) = run_cli(&["summary", path, "--max-decompressed-bytes", &enough]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(
            out.contains("3,339"),
            "{name}: the trace's 3,339 events: {out}"
        );
    }
}

/// The default limit is the smaller of 16 GiB and half the machine's memory, and `--help`
/// shows it.
#[cfg(target_os = "linux")]
#[test]
fn the_default_limit_is_half_the_memory_at_most_16_gib() {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    let expected = (16u64 << 30).min(kib * 1024 / 2);
    let got = leakscope::load::default_max_decompressed_bytes();
    // MemTotal leaves out what the kernel keeps for itself; sysconf counts every page.
    let diff = got.abs_diff(expected) as f64 / expected as f64;
    assert!(diff < 0.05, "{got} against {expected}");
    let (_, help, _) = run_cli(&["summary", "--help"]);
    assert!(help.contains(&format!("[default: {got}]")), "{help}");
}

/// A stream cut short, or one whose checksum does not match, is an error of the stream,
/// not a pickle that ends early.
#[test]
fn truncated_and_corrupt_streams_are_refused() {
    let raw = std::fs::read(fixture("scenarios/pp_last_stage_recv_pinned.pickle")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gz = gzip(&raw);
    let zst = zstd_stream(&raw);
    let mut crc = gz.clone();
    let n = crc.len();
    crc[n - 6] ^= 0xff; // inside the CRC-32 of the trailer
    for (name, bytes, says) in [
        ("cut.gz", gz[..gz.len() / 2].to_vec(), "truncated"),
        ("cut.zst", zst[..zst.len() / 2].to_vec(), "truncated"),
        ("crc.gz", crc, "checksum"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let (code, _, err) = run_cli(&["summary", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
    }
}

/// Bytes after the last gzip member that start no other member: exit 2, saying that there
/// is data after the end of the compressed stream and where it starts (not "truncated").
#[test]
fn gzip_with_trailing_garbage_names_where_the_stream_ended() {
    let raw = std::fs::read(fixture("scenarios/pp_last_stage_recv_pinned.pickle")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let one = gzip(&raw);
    let half = raw.len() / 2;
    let two = [gzip(&raw[..half]), gzip(&raw[half..])].concat();
    for (name, stream, tail) in [
        ("short.gz", &one, b"garbage".to_vec()),
        (
            "long.gz",
            &one,
            b"garbage that is longer than a gzip header".to_vec(),
        ),
        ("zeros.gz", &one, vec![0u8; 512]),
        ("members.gz", &two, b"garbage".to_vec()),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, [stream.as_slice(), &tail].concat()).unwrap();
        let (code, _, err) = run_cli(&["summary", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(
            err.contains("data after the end of the compressed stream"),
            "{name}: {err}"
        );
        assert!(
            err.contains(&format!(
                "{} bytes from compressed byte {}",
                tail.len(),
                stream.len()
            )),
            "{name}: {err}"
        );
        assert!(!err.contains("truncated"), "{name}: {err}");
    }
}

/// A zstd skippable frame: magic 0x184D2A50 + `nibble`, little-endian, then the payload's
/// size (4 bytes, little-endian) and the payload.
fn skippable(nibble: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = (0x184D_2A50u32 + u32::from(nibble)).to_le_bytes().to_vec();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// zstd files that start with skippable frames (metadata: pzstd writes one before each
/// frame) load as zstd and count the events the ground truth gives the plain file.
#[test]
fn zstd_after_skippable_frames_loads() {
    let name = "pp_last_stage_recv_pinned";
    let raw = std::fs::read(fixture(&format!("scenarios/{name}.pickle"))).unwrap();
    let truth = read_json(&fixture(&format!("scenarios/{name}.truth.json")));
    let dir = tempfile::tempdir().unwrap();
    let half = raw.len() / 2;
    for (file, bytes) in [
        (
            "sized.pickle.zst",
            [skippable(0, b"leakscope test metadata"), zstd_sized(&raw)].concat(),
        ),
        (
            "stream.pickle.zst",
            [
                skippable(0xf, &[]),
                skippable(0xa, &[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3]),
                zstd_stream(&raw),
            ]
            .concat(),
        ),
        (
            "between.pickle.zst",
            [
                skippable(5, b"x"),
                zstd_sized(&raw[..half]),
                skippable(6, b"y"),
                zstd_stream(&raw[half..]),
            ]
            .concat(),
        ),
    ] {
        let p = dir.path().join(file);
        std::fs::write(&p, bytes).unwrap();
        let v = leakscope_json(&["summary", p.to_str().unwrap()]);
        assert_eq!(v["format"]["compression"], "zstd", "{file}");
        assert_eq!(
            v["totals"]["trace_events"], truth["summary"]["trace_events"],
            "{file}"
        );
        assert_eq!(
            v["totals"]["actions"], truth["summary"]["actions"],
            "{file}"
        );
        // The limit applies as to any zstd file (refused before decoding where the first
        // real frame declares its size).
        let small = (raw.len() / 4).to_string();
        let (code, _, err) = run_cli(&[
            "summary",
            p.to_str().unwrap(),
            "--max-decompressed-bytes",
            &small,
        ]);
        assert_eq!(code, 2, "{file}: {err}");
        assert!(
            err.contains(&format!("limit of {small} bytes")),
            "{file}: {err}"
        );
    }
}
