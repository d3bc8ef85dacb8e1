"""Reference numbers for `leakscope oom` on a real OOM dump, computed with CPython's pickle.

At the `oom` event the allocator held: the final segments, plus the segments freed after
the event (an `empty_cache` after the exception), minus segments allocated after it. The
program held (requested bytes): the final active blocks' requested sizes, plus the
allocations freed after the event, minus the allocations made after it that are still live.

usage: python3 tests/expected/oom_reference.py FILE  -> JSON on stdout
"""
import json
import pickle
import sys


def main(path):
    d = pickle.load(open(path, "rb"))
    t = d["device_traces"][0]
    k = next(i for i, e in enumerate(t) if e["action"] == "oom")
    after = t[k + 1:]
    reserved = sum(s["total_size"] for s in d["segments"] if s.get("device", 0) == 0)
    reserved += sum(e["size"] for e in after if e["action"] == "segment_free")
    reserved -= sum(e["size"] for e in after if e["action"] == "segment_alloc")
    live = sum(b["requested_size"] for s in d["segments"] if s.get("device", 0) == 0
               for b in s["blocks"] if b["state"].startswith("active"))
    allocated_after = {}
    for e in after:
        if e["action"] == "alloc":
            allocated_after[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            if e["addr"] in allocated_after:
                del allocated_after[e["addr"]]  # born and freed after the OOM
            else:
                live += e["size"]  # alive at the OOM
    live -= sum(allocated_after.values())
    print(json.dumps({
        "event_index": k,
        "requested_bytes": t[k]["size"],
        "device_free_bytes": t[k]["device_free"],
        "reserved_bytes": reserved,
        "requested_live_bytes": live,
    }, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
