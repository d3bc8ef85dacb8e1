//! Long traces are scanned on another core while the rest of the file is parsed (the
//! loader lends a trace to a worker when the next one begins). What `summary` reports
//! must not depend on that: the counts are checked against a replay written in Python,
//! against a load on one thread (which lends nothing), and on a file that appends to the
//! first trace again after the second one began (so a lent trace must be taken back).

use crate::common::*;
use leakscope::LoadOptions;

/// Writes `plain.pickle` (CPython's pickler, protocol 4), `late.pickle` (written by hand:
/// the last 20,000 events of trace 0 are appended after trace 1 is complete) and
/// `truth.json` (per device: event counts per action, double allocs, unmatched frees and
/// segment frees, allocations open at the end, time range and reversals; the distinct
/// non-empty stacks and the frames they use).
const GENERATOR: &str = r#"
import json, pickle, random, struct, sys
out = sys.argv[1]
rng = random.Random(7)

# Twelve call sites over twenty distinct frames; every event gets a fresh list, as PyTorch
# writes them, of the same frame dicts. Sites 12-17 repeat sites 0-5 with equal frames
# that are other objects (other memo slots, so other bytes): the same stacks by content,
# which leakscope only finds when it interns them, after the traces were scanned.
FRAMES = [dict(filename=f"model/layer{k % 7}.py", line=10 + k, name=f"fn{k}") for k in range(20)]
SITES = [[FRAMES[(s * 3 + j) % 20] for j in range(1 + s % 4)] for s in range(12)]
SITES += [[dict(f) for f in SITES[s]] for s in range(6)]

def frames():
    return list(rng.choice(SITES)) if rng.random() < 0.9 else []

def trace(n, base):
    ev, live, segs, t = [], [], [], 1_000_000
    for i in range(n):
        t += rng.randint(0, 40)
        if i % 997 == 0:
            t -= 500                       # a clock step backwards
        r = rng.random()
        if r < 0.004:
            a = base + rng.randint(0, 60) * (2 << 20)
            ev.append(dict(action="segment_alloc", addr=a, size=2 << 20, stream=0, time_us=t, frames=[]))
            segs.append(a)
        elif r < 0.007:
            a = segs.pop(rng.randrange(len(segs))) if segs and rng.random() < 0.8 else base + 12345 * 512
            ev.append(dict(action="segment_free", addr=a, size=2 << 20, stream=0, time_us=t, frames=[]))
        elif r < 0.45 or not live:
            a = base + rng.randint(0, 40_000) * 512
            if rng.random() < 0.002 and live:
                a = rng.choice(live)           # an alloc at a live address
            size = rng.randint(1, 1 << 20)
            ev.append(dict(action="alloc", addr=a, size=size, stream=0, time_us=t, frames=frames()))
            live.append(a)
        elif r < 0.72:
            a = rng.choice(live)
            ev.append(dict(action="free_requested", addr=a, size=1, stream=0, time_us=t, frames=frames()))
        else:
            if rng.random() < 0.003:
                a = base + (50_000 + rng.randint(0, 999)) * 512   # never allocated
            else:
                a = live.pop(rng.randrange(len(live)))
            ev.append(dict(action="free_completed", addr=a, size=1, stream=0, time_us=t, frames=[]))
    return ev

def truth(ev):
    counts, open_, segs = {}, {}, set()
    d = u = us = rev = 0
    lo = hi = prev = None
    for e in ev:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
        a = e["addr"]
        if e["action"] == "alloc":
            d += a in open_
            open_[a] = e["size"]
        elif e["action"] == "free_completed":
            u += open_.pop(a, None) is None
        elif e["action"] == "segment_alloc":
            segs.add(a)
        elif e["action"] == "segment_free":
            us += a not in segs
            segs.discard(a)
        t = e["time_us"]
        lo = t if lo is None else min(lo, t)
        hi = t if hi is None else max(hi, t)
        rev += prev is not None and t < prev
        prev = t
    return dict(actions=counts, double_allocs=d, unmatched_frees=u, unmatched_segment_frees=us,
                open=len(open_), first_time_us=lo, last_time_us=hi, time_reversals=rev)

t0, t1 = trace(130_000, 0x7f00_0000_0000), trace(110_000, 0x7e00_0000_0000)
snap = {"segments": [], "device_traces": [t0, t1]}
with open(f"{out}/plain.pickle", "wb") as f:
    pickle.dump(snap, f, protocol=4)
key = lambda f: (f["filename"], f["line"], f["name"])
stacks = {tuple(key(f) for f in e["frames"]) for e in t0 + t1 if e["frames"]}
used_frames = {key(f) for e in t0 + t1 for f in e["frames"]}
json.dump(dict(devices=[truth(t0), truth(t1)], unique_stacks=len(stacks), unique_frames=len(used_frames)),
          open(f"{out}/truth.json", "w"))

# By hand: entries with their keys inline, no memo except the first trace list (slot 0).
def s(x):
    b = x.encode()
    return b"\x8c" + bytes([len(b)]) + b
def i(v):
    return b"\x8a" + bytes([8]) + v.to_bytes(8, "little", signed=True)
def frame(f):
    return b"}(" + s("filename") + s(f["filename"]) + s("line") + i(f["line"]) + s("name") + s(f["name"]) + b"u"
def entry(e):
    body = b"".join(s(k) + i(e[k]) for k in ("addr", "size", "stream", "time_us"))
    fl = b"](" + b"".join(frame(f) for f in e["frames"]) + b"e" if e["frames"] else b"]"
    return b"}(" + s("action") + s(e["action"]) + body + s("frames") + fl + b"u"
def items(evs):
    return b"".join(b"(" + b"".join(entry(e) for e in evs[k:k + 1000]) + b"e" for k in range(0, len(evs), 1000))
split = len(t0) - 20_000
p = b"\x80\x04}(" + s("segments") + b"]" + s("device_traces") + b"]("
p += b"]\x94" + items(t0[:split])      # trace 0, memoized in slot 0
p += b"]" + items(t1)                  # trace 1
p += b"e"                              # both placed in device_traces
p += b"h\x00" + items(t0[split:]) + b"0"   # more for trace 0, then POP
p += b"u."
open(f"{out}/late.pickle", "wb").write(p)
"#;

fn devices(v: &serde_json::Value) -> &Vec<serde_json::Value> {
    v["devices"].as_array().expect("devices")
}

#[test]
fn scans_made_ahead_match_a_python_replay_and_a_one_thread_load() {
    if !have_python() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ok = std::process::Command::new("python3")
        .arg("-c")
        .arg(GENERATOR)
        .arg(dir.path())
        .status()
        .expect("python3 runs")
        .success();
    assert!(ok, "the generator failed");
    let truth = read_json(&dir.path().join("truth.json"));
    for name in ["plain.pickle", "late.pickle"] {
        let path = dir.path().join(name);
        let ahead = load(&path);
        // Both traces are past the lending threshold, so both come back with a scan.
        for (d, t) in ahead.device_traces.iter().flatten().enumerate() {
            assert!(t.scan_cell.get().is_some(), "{name}: trace {d} has no scan");
        }
        let got = summary_json(&ahead, name);
        for key in ["unique_stacks", "unique_frames"] {
            assert_eq!(got["frames"][key], truth[key], "{name}: {key}");
        }
        for (d, want) in truth["devices"].as_array().unwrap().iter().enumerate() {
            let dev = &devices(&got)[d];
            for key in [
                "double_allocs",
                "unmatched_frees",
                "unmatched_segment_frees",
                "first_time_us",
                "last_time_us",
                "time_reversals",
            ] {
                assert_eq!(dev[key], want[key], "{name} device {d}: {key}");
            }
            assert_eq!(dev["actions"], want["actions"], "{name} device {d}");
            let events: u64 = want["actions"]
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum();
            assert_eq!(
                dev["trace_events"].as_u64(),
                Some(events),
                "{name} device {d}"
            );
            // No segments in the file: every allocation open at the end is a mismatch.
            assert_eq!(dev["replay_mismatches"], want["open"], "{name} device {d}");
        }
        let mut one_thread = LoadOptions::default();
        one_thread.threads = false;
        let single =
            leakscope::load_path(&path, one_thread).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            single
                .device_traces
                .iter()
                .flatten()
                .all(|t| t.scan_cell.get().is_none())
        );
        assert_eq!(summary_json(&single, name), got, "{name}: one thread");
    }
}
