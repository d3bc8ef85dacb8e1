#!/usr/bin/env python3
"""Reserved and requested bytes at past points of every device trace, by bookkeeping alone.

    python3 tests/expected/replay_points.py --root ../shared/fixtures/real \
        [--every 100] -o tests/expected/corpus_replay_points.json

Written independently of leakscope (standard library only). For each file under the root
that CPython unpickles to a dict with `segments` and `device_traces`, and each device whose
trace is not empty, it starts from the final state the file states and walks the trace
backwards:

* reserved after event k = the final segments' total_size, minus the size of every
  `segment_alloc`/`segment_map` after k, plus the size of every
  `segment_free`/`segment_unmap` after k;
* requested after event k = the requested bytes of the allocations alive after k, an
  allocation being alive from its `alloc` until its `free_completed` (or older traces'
  `free`), as PyTorch's requested_bytes counts it. Allocations the trace does not show
  being made are counted once per address: an active block of the final state with no
  open `alloc` at its address, or a free with no `alloc`, held its address from the start
  of the trace, or from just after the last event that freed that address; an `alloc` at
  an address still held ends the earlier allocation there.

It needs no model of blocks or segments, so it cannot share a mistake with a replay that
has one. Points are after every `every`-th event (0, every, 2*every, ...) and after the
last. Keys are `<basename of root>/<path relative to root>`; the JSON maps them to
`{device: [[k, reserved, requested], ...]}`.
"""
import argparse
import json
import os
import pickle
import sys

GROW = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
ACTIVE = {"active_allocated", "active_pending_free", "active_awaiting_free"}


def series(snap, device, trace):
    """Requested and reserved bytes before the first event, then after each event:
    (requested_0, reserved_0, reserved[], requested[])."""
    segs = [s for s in snap["segments"] if s.get("device", 0) == device]
    n = len(trace)
    # Reserved: back from the final segments.
    reserved = [0] * n
    r = sum(s["total_size"] for s in segs)
    for k in range(n - 1, -1, -1):
        reserved[k] = r
        e = trace[k]
        r -= GROW.get(e.get("action"), 0) * e.get("size", 0)
    # Requested: lifetimes [first event alive after (None: from the start), freed, bytes].
    lives, held, last_free = [], {}, {}
    for i, e in enumerate(trace):
        a, addr, size = e.get("action"), e.get("addr"), e.get("size", 0)
        if a == "alloc":
            if addr in held:
                lives[held.pop(addr)][1] = i
            held[addr] = len(lives)
            lives.append([i, None, size])
        elif a in ("free_completed", "free"):
            if addr in held:
                lives[held.pop(addr)][1] = i
            else:
                j = last_free.get(addr)
                lives.append([None if j is None else j + 1, i, size])
            last_free[addr] = i
    for s in segs:
        addr = s["address"]  # 2.0 files give no block address: blocks tile the segment
        for b in s.get("blocks", []):
            baddr = b.get("address", addr)
            addr = baddr + b["size"]
            if b.get("state") in ACTIVE and baddr not in held:
                j = last_free.get(baddr)
                lives.append([None if j is None else j + 1, None,
                              b.get("requested_size", b["size"])])
    delta = [0] * (n + 1)
    start = 0
    for first, freed, size in lives:
        if first is None:
            start += size
        else:
            delta[first] += size
        if freed is not None:
            delta[freed] -= size
    requested, live = [], start
    for k in range(n):
        live += delta[k]
        requested.append(live)
    return start, r, reserved, requested


def device_points(snap, device, trace, every):
    _, _, reserved, requested = series(snap, device, trace)
    n = len(trace)
    wanted = sorted(set(range(0, n, every)) | {n - 1})
    return [[k, reserved[k], requested[k]] for k in wanted]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    root = os.path.normpath(args.root)
    result = {}
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    snap = pickle.load(f)
            except Exception:
                continue
            if not isinstance(snap, dict) or "device_traces" not in snap:
                continue
            key = os.path.basename(root) + "/" + os.path.relpath(path, root)
            per = {}
            for d, trace in enumerate(snap["device_traces"]):
                if trace:
                    per[str(d)] = device_points(snap, d, trace, args.every)
            if per:
                result[key] = per
    with open(args.output, "w") as f:
        json.dump(result, f, sort_keys=True, indent=1)
        f.write("\n")
    print("%d files -> %s" % (len(result), args.output), file=sys.stderr)


if __name__ == "__main__":
    main()
