#!/usr/bin/env python3
"""Generate a series of large state-only snapshots (what
``_record_memory_history(enabled="state")`` and one ``_dump_snapshot`` per step write) for
the series benchmark (benches/series.sh).

Each file is ``{segments, device_traces: [[]], allocator_settings}`` pickled with protocol
4: one device, large segments holding many live blocks with ``stacks="python"`` frames
from frames.json, each frame one shared dict (as py_symbolize shares them) and one
``frames`` list per block. Between files: a share of the blocks is freed and made again
elsewhere (churn at the same sites), and one site keeps ``--leak-blocks`` more blocks
per step (a leak, so the analysis has something to find). Files are ``step{NNNN}.pickle``.

Python 3 standard library only; deterministic for a given --seed.
"""

import argparse
import json
import os
import pickle
import random

MiB = 1024 * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--out", required=True, help="directory")
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--blocks", type=int, default=370_000, help="live blocks per file (about 50 MB a file)")
    ap.add_argument("--churn", type=float, default=0.05, help="share of blocks remade per step")
    ap.add_argument("--leak-blocks", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "frames.json")) as f:
        catalog = json.load(f)
    stacks = []
    for s in catalog["stacks"].values():
        base = s.get("stacks_all_simplified") or s.get("stacks_python") or []
        if base:
            stacks.append(base)
    # Variants: each base stack under several callers (distinct call paths, as a model's
    # layers give), frame dicts shared as py_symbolize shares them.
    shared = {}

    def frame(d):
        k = (d["filename"], d["line"], d["name"])
        if k not in shared:
            shared[k] = {"name": d["name"], "filename": d["filename"], "line": d["line"]}
        return shared[k]

    variants = []
    for i, base in enumerate(stacks):
        for layer in range(40):
            extra = {"filename": "/home/user/model.py", "line": 100 + layer, "name": "forward"}
            variants.append([frame(x) for x in base] + [frame(extra)])
    leak_stack = variants[0]

    sizes = [512, 1024, 4096, 65536, 262144, 1 * MiB, 2 * MiB, 8 * MiB]
    next_addr = [0x7F0000000000]

    def new_block():
        size = rng.choice(sizes)
        addr = next_addr[0]
        next_addr[0] += size
        return [addr, size, rng.randrange(len(variants))]

    live = [new_block() for _ in range(a.blocks)]
    leaked = []
    os.makedirs(a.out, exist_ok=True)
    for step in range(1, a.files + 1):
        if step > 1:
            for _ in range(int(len(live) * a.churn)):
                live[rng.randrange(len(live))] = new_block()
            for _ in range(a.leak_blocks):
                addr = next_addr[0]
                next_addr[0] += 1 * MiB
                leaked.append([addr, 1 * MiB, -1])
        blocks = sorted(live + leaked)
        segments = []
        # One segment per 1,000 blocks, each as large as its blocks (no free space).
        for i in range(0, len(blocks), 1000):
            chunk = blocks[i:i + 1000]
            bl = []
            for addr, size, v in chunk:
                bl.append({
                    "address": addr,
                    "size": size,
                    "requested_size": size,
                    "state": "active_allocated",
                    "frames": list(leak_stack if v < 0 else variants[v]),
                })
            total = sum(b["size"] for b in bl)
            segments.append({
                "device": 0, "address": chunk[0][0], "total_size": total,
                "allocated_size": total, "active_size": total, "requested_size": total,
                "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                "is_expandable": False, "frames": [], "blocks": bl,
            })
        snap = {"segments": segments, "device_traces": [[]],
                "allocator_settings": {"expandable_segments": False}}
        with open(os.path.join(a.out, f"step{step:04d}.pickle"), "wb") as f:
            pickle.dump(snap, f, protocol=4)


if __name__ == "__main__":
    main()
