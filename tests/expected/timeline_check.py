#!/usr/bin/env python3
"""Checks `leakscope timeline --json` against CPython: drawn plus summarized bytes equal
the requested bytes a replay by bookkeeping alone gives (replay_points.series), after
every event (or after `--points` evenly spaced ones), on each device of each file.

    python3 tests/expected/timeline_check.py BINARY [--max-allocations N] [--points K] FILE...

Prints one line per device and exits 1 on any mismatch or when more allocations are
drawn than asked for.
"""
import argparse
import bisect
import json
import os
import pickle
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replay_points import series  # noqa: E402


def drawn_after(bands, k):
    """Bytes of the drawn allocations alive after event k."""
    return sum(b["bytes"] for b in bands
               if (b["first_event"] is None or b["first_event"] <= k)
               and (b["free_event"] is None or b["free_event"] > k))


def summarized_after(s, k):
    i = bisect.bisect_right(s["events"], k)
    return s["before_first_event"] if i == 0 else s["bytes"][i - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--max-allocations", type=int, default=50)
    ap.add_argument("--points", type=int, default=0, help="0: every event")
    a = ap.parse_args()
    bad = 0
    for path in a.files:
        out = subprocess.run([a.binary, "timeline", path, "--json",
                              "--max-allocations", str(a.max_allocations)],
                             check=True, capture_output=True).stdout
        got = json.loads(out)
        assert got["schema"] == "leakscope.timeline/1", got["schema"]
        with open(path, "rb") as f:
            snap = pickle.load(f)
        for d in got["devices"]:
            dev = d["device"]
            trace = snap["device_traces"][dev] if dev < len(snap["device_traces"]) else []
            start, _, _, requested = series(snap, dev, trace)
            n = len(trace)
            bands = d["allocations"]
            if len(bands) > a.max_allocations:
                print("%s device %d: %d drawn > %d" % (path, dev, len(bands), a.max_allocations))
                bad += 1
            # Sweep: the drawn bytes change only at their own events.
            if a.points:
                ks = sorted({round(i * (n - 1) / max(a.points - 1, 1)) for i in range(a.points)}) if n else []
            else:
                ks = range(n)
            changes = {}
            live = 0
            for b in bands:
                if b["first_event"] is None:
                    live += b["bytes"]
                else:
                    changes[b["first_event"]] = changes.get(b["first_event"], 0) + b["bytes"]
                if b["free_event"] is not None:
                    changes[b["free_event"]] = changes.get(b["free_event"], 0) - b["bytes"]
            wrong = 0
            s = d["summarized"]
            if live + s["before_first_event"] != start:
                wrong += 1
            if a.points:
                for k in ks:
                    if drawn_after(bands, k) + summarized_after(s, k) != requested[k]:
                        wrong += 1
            else:
                j = 0
                cur = s["before_first_event"]
                ev = s["events"]
                for k in range(n):
                    live += changes.get(k, 0)
                    while j < len(ev) and ev[j] <= k:
                        cur = s["bytes"][j]
                        j += 1
                    if live + cur != requested[k]:
                        wrong += 1
            print("%s device %d: %d events, %d allocations (%d drawn), %d points checked, %d wrong"
                  % (os.path.basename(path), dev, n, d["allocations_total"], len(bands),
                     len(ks) + 1, wrong))
            bad += wrong
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
