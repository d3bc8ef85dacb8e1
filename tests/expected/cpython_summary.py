#!/usr/bin/env python3
"""Reference (CPython, stdlib-only) implementation of the `leakscope summary` numbers.

Independent of the Rust code: it loads each snapshot with `pickle.load` (after
checking with `pickletools.genops` that the stream holds no opcode able to
import or construct objects) and computes the per-file / per-device numbers
defined in tests/expected/README.md.

usage:
    python3 tests/expected/cpython_summary.py --root DIR [--root DIR2 ...] -o OUT.json

Every file under each root (recursively) that parses as a complete pickle is
summarised; other files (PROVENANCE.md, SHA256SUMS, ...) are skipped. Keys of
the output object are "<basename(root)>/<path relative to root>".
"""

import argparse
import json
import os
import pickle
import pickletools
import sys
import time

FORBIDDEN_OPCODES = frozenset({
    "GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX",
    "INST", "OBJ", "PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4",
})


class NotAPickle(Exception):
    pass


class Refused(Exception):
    pass


def scan_opcodes(data):
    """Walk the opcode stream with pickletools.genops.

    Returns the protocol from the PROTO opcode (None when there is none).
    Raises NotAPickle if the bytes are not a complete pickle (no STOP or a
    bad opcode), Refused if a forbidden opcode appears.
    """
    protocol = None
    forbidden = set()
    saw_stop = False
    try:
        for i, (op, arg, _pos) in enumerate(pickletools.genops(data)):
            if op.name == "PROTO" and i == 0:
                protocol = arg
            if op.name in FORBIDDEN_OPCODES:
                forbidden.add(op.name)
            if op.name == "STOP":
                saw_stop = True
    except Exception as e:  # ValueError for unknown opcode / truncated data
        raise NotAPickle(str(e))
    if not saw_stop:
        raise NotAPickle("no STOP opcode")
    if forbidden:
        raise Refused("forbidden opcodes: " + ", ".join(sorted(forbidden)))
    return protocol


def new_sums():
    return {
        "segments": 0,
        "blocks": 0,
        "active_blocks": 0,
        "reserved_bytes": 0,
        "allocated_bytes": 0,
        "requested_bytes": 0,
        "active_bytes": 0,
        "trace_events": 0,
        "actions": {},
        "blocks_by_state": {},
    }


def bump(d, key, n=1):
    # JSON object keys must be strings (and sort_keys needs one key type):
    # a missing action/state is counted under "None".
    if not isinstance(key, str):
        key = str(key)
    d[key] = d.get(key, 0) + n


def frame_key(fr):
    if isinstance(fr, dict):
        return (fr.get("filename"), fr.get("line"), fr.get("name"))
    return ("<non-dict frame>", repr(fr), None)


def summarise(obj, protocol):
    if isinstance(obj, list):
        layout = "list"
        top = {"segments": obj}
        top_keys = []
    elif isinstance(obj, dict):
        layout = "dict"
        top = obj
        top_keys = list(obj.keys())
    else:
        raise ValueError("top-level object is %s, not dict or list" % type(obj).__name__)

    segments = top.get("segments") or []
    traces = top.get("device_traces") or []

    frames_seen = set()
    stacks_seen = set()

    def see_frames(frames):
        if not isinstance(frames, list):
            return
        keys = tuple(frame_key(f) for f in frames)
        frames_seen.update(keys)
        if keys:
            stacks_seen.add(keys)

    devices = {}

    def dev(d):
        if d not in devices:
            s = new_sums()
            s.update({
                "device": d,
                "first_time_us": None,
                "last_time_us": None,
                "unmatched_frees": 0,
                "pre_trace_blocks": 0,
                "unmatched_segment_frees": 0,
                "_block_addrs_active": [],
            })
            devices[d] = s
        return devices[d]

    # --- segments / blocks
    for seg in segments:
        d = dev(seg.get("device", 0))
        d["segments"] += 1
        d["reserved_bytes"] += seg.get("total_size", 0)
        if "frames" in seg:
            see_frames(seg["frames"])
        addr = seg.get("address", 0)
        for blk in seg.get("blocks") or []:
            size = blk.get("size", 0)
            state = blk.get("state")
            baddr = blk["address"] if "address" in blk else addr
            addr += size
            d["blocks"] += 1
            bump(d["blocks_by_state"], state)
            if state == "active_allocated":
                d["allocated_bytes"] += size
            if isinstance(state, str) and state.startswith("active_"):
                # requested, as torch's requested_bytes: until free_completed
                d["requested_bytes"] += blk.get("requested_size", size)
                d["active_blocks"] += 1
                d["active_bytes"] += size
                d["_block_addrs_active"].append(baddr)
            if "frames" in blk:
                see_frames(blk["frames"])
            for h in blk.get("history") or []:
                if isinstance(h, dict) and "frames" in h:
                    see_frames(h["frames"])

    # --- traces
    for i, trace in enumerate(traces):
        d = dev(i)
        live = set()
        live_segs = set()
        times = []
        for e in trace:
            d["trace_events"] += 1
            action = e.get("action")
            bump(d["actions"], action)
            if "time_us" in e:
                times.append(e["time_us"])
            if "frames" in e:
                see_frames(e["frames"])
            a = e.get("addr")
            if action == "alloc":
                live.add(a)
            elif action == "free_completed":
                if a in live:
                    live.discard(a)
                else:
                    d["unmatched_frees"] += 1
            elif action in ("segment_alloc", "segment_map"):
                live_segs.add(a)
            elif action in ("segment_free", "segment_unmap"):
                if a in live_segs:
                    live_segs.discard(a)
                else:
                    d["unmatched_segment_frees"] += 1
        if times:
            d["first_time_us"] = min(times)
            d["last_time_us"] = max(times)
        d["_live"] = live

    for d in devices.values():
        live = d.pop("_live", set())
        d["pre_trace_blocks"] = sum(1 for a in d.pop("_block_addrs_active") if a not in live)

    dev_list = [devices[k] for k in sorted(devices)]

    totals = new_sums()
    for d in dev_list:
        for k, v in d.items():
            if k not in totals:
                continue
            if isinstance(v, dict):
                for kk, vv in v.items():
                    bump(totals[k], kk, vv)
            else:
                totals[k] += v

    wrapped = any(
        d["trace_events"] > 0 and (d["unmatched_frees"] > 0 or d["pre_trace_blocks"] > 0)
        for d in dev_list
    )
    settings = top.get("allocator_settings")
    if top.get("trace_alloc_overflowed") is True:
        wrapped = True
    if isinstance(settings, dict) and settings.get("trace_alloc_overflowed") is True:
        wrapped = True

    ann = top.get("external_annotations")
    return {
        "layout": layout,
        "pickle_protocol": protocol,
        "top_keys": top_keys,
        "totals": totals,
        "devices": dev_list,
        "unique_frames": len(frames_seen),
        "unique_stacks": len(stacks_seen),
        "annotations": len(ann) if isinstance(ann, list) else 0,
        "wrapped": wrapped,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", action="append", required=True,
                    help="directory to scan recursively (repeatable)")
    ap.add_argument("-o", "--output", required=True, help="output JSON file")
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    out = {}
    refused = []
    for root in args.root:
        root = os.path.normpath(root)
        prefix = os.path.basename(root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for fn in sorted(filenames):
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                key = prefix + "/" + rel
                with open(path, "rb") as f:
                    data = f.read()
                try:
                    protocol = scan_opcodes(data)
                except NotAPickle as e:
                    print("skip (not a pickle): %s: %s" % (key, e), file=sys.stderr)
                    continue
                except Refused as e:
                    print("REFUSED: %s: %s" % (key, e), file=sys.stderr)
                    refused.append(key)
                    continue
                obj = pickle.loads(data)
                out[key] = summarise(obj, protocol)
    if refused:
        print("refusing to write output: %d file(s) with forbidden opcodes" % len(refused),
              file=sys.stderr)
        return 2
    with open(args.output, "w") as f:
        json.dump(out, f, sort_keys=True, indent=1)
        f.write("\n")
    print("%d files summarised in %.2f s -> %s" % (len(out), time.monotonic() - t0, args.output),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
