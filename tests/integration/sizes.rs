//! Sizes near 2^64: a file can claim any 64-bit size, and every sum, end address and
//! rounding must stop at the top rather than wrap round to a small number. No share is
//! above 100%, no row above its total, no request "would fit" in 0 bytes, and the input is
//! flagged as impossible. Every expected figure is worked out here from the numbers in
//! the snapshot.

use leakscope::Session;
use leakscope::analysis::At;
use serde_json::{Value, json};

use crate::common::run_cli;

const TOP: u64 = u64::MAX;
/// The largest size a running count takes as it is (2^63 - 1): larger sizes count as it.
const CAP: u64 = i64::MAX as u64;
/// The last granule of the address space: 2^64 - 512.
const LAST: u64 = TOP - 511;

fn frames(name: &str) -> Value {
    json!([{"name": name, "filename": "/work/train.py", "line": 7}])
}

fn event(action: &str, addr: u64, size: u64, site: &str) -> Value {
    json!({"action": action, "addr": addr, "size": size, "stream": 0, "frames": frames(site)})
}

fn block(address: u64, size: u64, requested: u64, state: &str, site: &str) -> Value {
    json!({"address": address, "size": size, "requested_size": requested, "state": state,
           "frames": frames(site)})
}

fn segment(address: u64, total: u64, blocks: Vec<Value>) -> Value {
    json!({"device": 0, "address": address, "total_size": total, "stream": 0,
           "segment_type": "large", "is_expandable": false, "blocks": blocks})
}

fn session_of(doc: &Value) -> Session {
    let snap = leakscope::load::load_deserializer(doc.clone(), leakscope::model::Container::Json)
        .expect("the snapshot loads");
    Session::from_snapshot(snap, "sizes.json")
}

/// One block of 2^64 - 512 bytes held since before the trace (segment [0, 2^64 - 512)),
/// the last granule a traced allocation of 100 bytes, then an OOM asking for 2^64 - 1
/// bytes with nothing free anywhere.
fn huge_block() -> Value {
    json!({
        "segments": [
            segment(0, LAST, vec![block(0, LAST, LAST, "active_allocated", "huge")]),
            segment(LAST, 512, vec![block(LAST, 512, 100, "active_allocated", "small")]),
        ],
        "device_traces": [[
            event("alloc", LAST, 100, "small"),
            {"action": "oom", "addr": 0, "size": TOP, "stream": 0, "device_free": 0,
             "frames": frames("asks")},
        ]],
    })
}

fn write(doc: &Value) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sizes.json");
    std::fs::write(&path, serde_json::to_vec(doc).unwrap()).unwrap();
    let p = path.to_str().unwrap().to_string();
    (dir, p)
}

fn cli_json(args: &[&str]) -> Value {
    let (code, out, err) = run_cli(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// The properties every `top` must keep, whatever the sizes.
fn assert_top_sane(rows: &[(u64, f64)], total: u64, live: u64) {
    for &(bytes, share) in rows {
        assert!((0.0..=1.0).contains(&share), "share {share}");
        assert!(bytes <= total, "row {bytes} above the total {total}");
        assert!(bytes <= live, "row {bytes} above the live bytes {live}");
    }
}

#[test]
fn a_block_of_nearly_2_64_bytes_keeps_shares_within_the_whole() {
    let s = session_of(&huge_block());
    let top = s.top(&Default::default(), At::End, 10).unwrap();
    let d = &top.devices[0];
    // The huge block counts as 2^63 - 1, the small one as its 100 requested bytes.
    assert_eq!(d.at.requested_bytes, CAP + 100);
    assert_eq!(d.total_bytes, CAP + 100);
    let rows: Vec<(u64, f64)> = d.rows.iter().map(|r| (r.bytes, r.share)).collect();
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), [CAP, 100]);
    assert_top_sane(&rows, d.total_bytes, d.at.requested_bytes);
    // The same through the CLI's JSON, and in the text no share above 100%.
    let (_dir, path) = write(&huge_block());
    let j = cli_json(&["top", "--json", &path]);
    let d = &j["devices"][0];
    let total = d["total_bytes"].as_u64().unwrap();
    let live = d["at"]["requested_bytes"].as_u64().unwrap();
    let rows: Vec<(u64, f64)> = d["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["bytes"].as_u64().unwrap(), r["share"].as_f64().unwrap()))
        .collect();
    assert_eq!(rows.len(), 2);
    assert_top_sane(&rows, total, live);
    let (code, text, err) = run_cli(&["top", &path]);
    assert_eq!(code, 0, "{err}");
    let shares: Vec<f64> = text
        .split_whitespace()
        .filter_map(|w| w.strip_suffix('%')?.parse().ok())
        .collect();
    assert_eq!(shares.len(), 3, "two rows and the total: {text}");
    assert!(shares.iter().all(|&p| p <= 100.0), "{text}");
    // The impossible size is said once, on standard error.
    assert!(err.contains("past what a device holds"), "{err}");
}

#[test]
fn an_oom_asking_for_2_64_bytes_never_fits_in_nothing() {
    let s = session_of(&huge_block());
    let r = s.oom(&Default::default()).unwrap();
    let d = &r.devices[0];
    assert_eq!(d.oom.request_bytes, Some(TOP));
    assert_eq!(d.cached_free_bytes, 0);
    assert_eq!(d.cached_free_in_pool_bytes, 0);
    // 2^64 - 1 rounded up to a granule would wrap to 0 (and "fit" in 0 bytes); it
    // stops at the top instead.
    assert_eq!(d.would_fit_if_contiguous, Some(false));
    // Reserved is 2^64 - 512 + 512 = 2^64: one past what 64 bits hold.
    assert_eq!(d.reserved_bytes, TOP);
    assert!(d.reserved_bytes >= d.active_bytes);
    // The advice is not fragmentation (nothing was free).
    assert!(
        !d.advice
            .iter()
            .any(|a| matches!(a, leakscope::analysis::oom::Advice::Fragmentation { .. }))
    );
    let c = r
        .disagreements
        .iter()
        .find(|c| c.device == 0)
        .expect("the device is flagged");
    assert!(c.impossible_sizes > 0, "{c:?}");

    let (_dir, path) = write(&huge_block());
    let j = cli_json(&["oom", "--json", &path]);
    let d = &j["devices"][0];
    assert_eq!(d["would_fit_if_contiguous"], json!(false));
    assert_eq!(d["cached_free_in_pool_bytes"], json!(0));
    assert!(j["disagreements"][0]["impossible_sizes"].as_u64().unwrap() > 0);
}

#[test]
fn sums_past_2_64_stop_at_the_top_and_come_back_exactly() {
    // Three traced allocations of 2^63 bytes (each counted as 2^63 - 1), then one freed.
    let trace = vec![
        event("alloc", 0x1000, 1 << 63, "a"),
        event("alloc", 0x2000, 1 << 63, "b"),
        event("alloc", 0x3000, 1 << 63, "c"),
        event("free_completed", 0x3000, 1 << 63, "c"),
    ];
    let doc = json!({"segments": [], "device_traces": [trace]});
    let s = session_of(&doc);
    // After event 2: 3 * (2^63 - 1) = 2^64 + 2^63 - 3, past 64 bits: stopped at the top.
    let at2 = s.top(&Default::default(), At::Event(2), 10).unwrap();
    let d = &at2.devices[0];
    assert_eq!(d.at.requested_bytes, TOP);
    assert_eq!(d.total_bytes, TOP);
    let rows: Vec<(u64, f64)> = d.rows.iter().map(|r| (r.bytes, r.share)).collect();
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        [CAP, CAP, CAP]
    );
    assert_top_sane(&rows, d.total_bytes, d.at.requested_bytes);
    // After the free: 2 * (2^63 - 1) = 2^64 - 2, exactly (the count never wrapped).
    let at3 = s.top(&Default::default(), At::Event(3), 10).unwrap();
    assert_eq!(at3.devices[0].at.requested_bytes, TOP - 1);
    assert_eq!(at3.devices[0].total_bytes, TOP - 1);
    // The tree's sums stop at the top too.
    let tree = s.tree(&Default::default(), At::Event(2)).unwrap();
    assert_eq!(tree.devices[0].total_bytes, TOP);
}

#[test]
fn the_summary_saturates_and_says_why() {
    // Two segments of 2^63 bytes each hold 2^64 bytes: one past the top. The second's
    // block claims more than its segment.
    let doc = json!({
        "segments": [
            segment(0, 1 << 63, vec![block(0, 1 << 63, 1 << 63, "active_allocated", "a")]),
            segment(1 << 63, 1 << 63, vec![block(1 << 63, TOP, 5, "inactive", "b")]),
        ],
        "device_traces": [[]],
    });
    let s = session_of(&doc);
    let sum = s.summary();
    let t = &sum.devices[0].totals;
    assert_eq!(t.reserved_bytes, TOP);
    assert_eq!(t.active_bytes, 1 << 63);
    assert_eq!(t.cached_free_bytes, TOP - (1 << 63));
    assert!(
        sum.warnings
            .iter()
            .any(|w| w.contains("add up past 2^64 - 1")),
        "{:?}",
        sum.warnings
    );
    assert!(
        sum.warnings
            .iter()
            .any(|w| w.contains("1 block is larger than its segment")),
        "{:?}",
        sum.warnings
    );
    // `segments` draws it without wrapping either: totals within reserved.
    let seg = s.segments(&Default::default(), At::End).unwrap();
    let tt = &seg.devices[0].totals;
    assert_eq!(tt.reserved_bytes, TOP);
    assert_eq!(tt.active_bytes, 1 << 63);
    let (_dir, path) = write(&doc);
    let (code, text, err) = run_cli(&["segments", &path]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("2 segments"), "{text}");
}
