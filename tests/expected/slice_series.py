#!/usr/bin/env python3
"""Compares a slice with its original by CPython alone (tests/integration/slice.rs).

    python3 tests/expected/slice_series.py ORIGINAL SLICE DEVICE FIRST

Loads both pickles with `pickle.load` and replays both with `series` of
replay_points.py (independent of leakscope). The slice's events must equal the
original's events FIRST, FIRST+1, ... dict for dict (every key the original had), and
the reserved and requested bytes after each slice event k must equal the original's
after event FIRST+k. Prints one JSON object: events, compared (pairs of numbers
compared), mismatches (the first few as [k, reserved_orig, reserved_slice,
requested_orig, requested_slice]), same_events, and the slice's top-level keys.
"""
import json
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replay_points import series  # noqa: E402


def main():
    orig_path, slice_path, device, first = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with open(orig_path, "rb") as f:
        orig = pickle.load(f)
    with open(slice_path, "rb") as f:
        sl = pickle.load(f)
    ot, st = orig["device_traces"][device], sl["device_traces"][device]
    n = len(st)
    _, _, ores, oreq = series(orig, device, ot)
    _, _, sres, sreq = series(sl, device, st)
    bad = [[k, ores[first + k], sres[k], oreq[first + k], sreq[k]]
           for k in range(n)
           if (ores[first + k], oreq[first + k]) != (sres[k], sreq[k])]
    print(json.dumps({
        "events": n,
        "compared": 2 * n,
        "mismatches": len(bad),
        "first_mismatches": bad[:5],
        "same_events": st == ot[first:first + n],
        "top_keys": list(sl.keys()),
        "devices": len(sl["device_traces"]),
    }))


if __name__ == "__main__":
    main()
