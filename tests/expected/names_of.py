#!/usr/bin/env python3
"""The names (issue 37) of a snapshot's memory at the end and its phases, derived with
CPython's pickle by the scenario checker's own rules (fixtures/gen/verify.py, which reads
only the pickle), never by leakscope: for the real-corpus test.

    python3 tests/expected/names_of.py FILE DEVICE   -> JSON {"end": {kind: {label: bytes}}, "phases": [...]}
"""

import json
import os
import pickle
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "gen"))
import verify  # noqa: E402


class Collect:
    """Takes what the checker derived (the 'got' side of its comparisons)."""

    def __init__(self):
        self.got = {}

    def eq(self, what, _want, got):
        self.got[what.split(" ")[0]] = got

    def ok(self, *_):
        pass


def main():
    path, device = sys.argv[1], int(sys.argv[2])
    with open(path, "rb") as f:
        snap = pickle.load(f)
    trace = snap["device_traces"][device]
    anns = [a for a in snap.get("external_annotations") or [] if a.get("device", device) == device]
    blocks = [b for s in snap["segments"] if s["device"] == device for b in s["blocks"]
              if b["state"] == "active_allocated"]
    truth = {"names": {"rules": dict.fromkeys(verify.NAME_KINDS)}, "phases": [],
             "peak": {"event_index": len(trace) - 1, "live_requested_bytes": 0},
             "end": {"live_requested_bytes": 0}}
    c = Collect()
    verify.check_names(trace, anns, blocks, truth, c)
    end = {k: {lab: v["bytes"] for lab, v in m.items()} for k, m in c.got["names.end"].items()}
    print(json.dumps({"end": end, "phases": c.got["phases"]}))


if __name__ == "__main__":
    main()
