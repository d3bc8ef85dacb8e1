"""`leakscope export --pprof`, decoded with pprof's official ``profile.proto``.

``tests/protos/profile.proto`` (copied unchanged from github.com/google/pprof) is compiled
here with ``grpc_tools.protoc``; the profile is read with the generated module, never with
leakscope's encoder. Totals are checked against the scenario generator's ground truth
(live bytes and allocations by site at the end and at the peak, survivors per window) and
against ``top``.
"""

from __future__ import annotations

import gzip
import importlib
import json
import pickle
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from cli import ROOT, cli

protoc = pytest.importorskip("grpc_tools.protoc")
SCENARIOS = ["control_no_leak", "fragmentation_oom", "late_onset_leak", "loss_accum_no_detach",
             "plain_loop_kept_logits", "plain_one_step", "pp_last_stage_recv_pinned",
             "two_devices_recv_leak", "wrapped_ring_buffer"]


@pytest.fixture(scope="module")
def profile_pb2(tmp_path_factory):
    out = tmp_path_factory.mktemp("pprof_proto")
    protos = ROOT / "python" / "tests" / "protos"
    rc = protoc.main(["protoc", f"-I{protos}", f"--python_out={out}", str(protos / "profile.proto")])
    assert rc == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("profile_pb2")
    finally:
        sys.path.remove(str(out))


def export(tmp_path: Path, path: Path, *extra: str) -> Path:
    out = tmp_path / "out.pb.gz"
    r = subprocess.run(cli() + ["export", str(path), "--pprof", str(out), *extra],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def decode(profile_pb2, path: Path):
    data = path.read_bytes()
    assert data[:2] == b"\x1f\x8b", "pprof files are gzipped"
    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress(data))
    return p


def site_of(frames, role=None) -> str:
    """The generator's site of a stack: its innermost Python frame. A stack without frames
    is one location with no file, named for what it is: ``<untraced>`` (a block with
    neither frames nor an alloc event) or ``<no python frame>``."""
    if not frames:  # a growth test's key, its location already set aside
        return "<no python frame>"
    if len(frames) == 1 and frames[0][0] == "":
        assert frames[0][2] in ("<untraced>", "<no python frame>")
        return frames[0][2]
    py = [f for f in frames if f[0].endswith(".py")]
    return f"{py[0][0]}:{py[0][1]}:{py[0][2]}" if py else "<no python frame>"


class Read:
    """A decoded profile's strings, frames and samples, resolved."""

    def __init__(self, p):
        self.p = p
        s = p.string_table
        assert s[0] == ""
        self.types = [(s[t.type], s[t.unit]) for t in p.sample_type]
        funcs = {f.id: (s[f.name], s[f.filename]) for f in p.function}
        self.locs = {}
        for loc in p.location:
            (line,) = loc.line
            name, filename = funcs[line.function_id]
            self.locs[loc.id] = (filename, line.line, name)
        self.default = s[p.default_sample_type]

    def samples(self):
        """(frames, values, labels) per sample: numeric labels as numbers, string labels
        (``role``) as strings."""
        s = self.p.string_table
        for smp in self.p.sample:
            frames = [self.locs[i] for i in smp.location_id]
            labels = {s[lb.key]: (s[lb.str] if lb.str else lb.num) for lb in smp.label}
            yield frames, list(smp.value), labels

    def by_site(self, device=None):
        """Σ values by the innermost Python frame, as the generator names sites."""
        out = defaultdict(lambda: [0, 0])
        for frames, values, labels in self.samples():
            if device is not None and labels["device"] != device:
                continue
            site = site_of(frames, labels.get("role"))
            out[site][0] += values[0]
            out[site][1] += values[1]
        return {k: tuple(v) for k, v in out.items()}


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("at", ["end", "peak"])
def test_live_bytes_by_stack_add_up_to_the_truth(tmp_path, profile_pb2, scenario, name, at):
    s = scenario(name)
    prof = Read(decode(profile_pb2, export(tmp_path, s.path, "--at", at)))
    assert prof.types == [("space", "bytes"), ("objects", "count")]
    assert prof.default == "space"
    for d in s.devices:
        truth = d["end" if at == "end" else "peak"]
        got = prof.by_site(d["device"])
        assert sum(v[0] for v in got.values()) == truth["live_requested_bytes"]
        for site, want in truth["by_site"].items():
            assert got[site] == (want["bytes"], want["blocks"]), site


@pytest.mark.parametrize("at", ["end", "peak"])
def test_the_total_is_what_top_reports(tmp_path, profile_pb2, at):
    path = ROOT / "fixtures" / "scenarios" / "two_devices_recv_leak.pickle"
    prof = Read(decode(profile_pb2, export(tmp_path, path, "--at", at)))
    top = json.loads(subprocess.run(cli() + ["top", str(path), "--at", at, "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    for dev in top["devices"]:
        located = [v[0] for frames, v, lb in prof.samples()
                   if lb["device"] == dev["device"] and frames]
        # Every byte has a location, so pprof's own totals are the file's.
        assert sum(located) == dev["total_bytes"]


def test_stacks_are_leaf_first_with_functions_and_lines(tmp_path, profile_pb2, scenario):
    s = scenario("pp_last_stage_recv_pinned")
    prof = Read(decode(profile_pb2, export(tmp_path, s.path, "--at", "peak")))
    recv = [frames for frames, _, _ in prof.samples()
            if any(f[2] == "create_tensor_recv_prev" for f in frames)]
    assert recv
    for frames in recv:
        py = [f for f in frames if f[0].endswith(".py")]
        assert py[0][2] == "create_tensor_recv_prev" and py[0][1] == 331
        assert all(isinstance(f[1], int) for f in frames)


def survivors(trace, starts):
    """Bookkeeping of the leak finder's documented rule, from the pickle: an allocation born
    in window w survives when it is alive at the end of window w + 1 (at the end of the
    trace, for the last window), a window running from its start to the next window's start.
    Per full stack: (bytes per window, rounded to the nearest byte; windows with
    survivors)."""
    n = len(trace)
    ends = starts[1:] + [n]
    freed, held = {}, {}
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            if e["addr"] in held:
                freed[held.pop(e["addr"])] = i
            held[e["addr"]] = i
        elif e["action"] in ("free_completed", "free"):
            j = held.pop(e["addr"], None)
            if j is not None:
                freed[j] = i
    total, grown = defaultdict(int), defaultdict(set)
    for w, (a, b) in enumerate(zip(starts, ends)):
        horizon = ends[w + 1] if w + 1 < len(starts) else n
        for i in range(a, b):
            e = trace[i]
            if e["action"] != "alloc":
                continue
            f = freed.get(i)
            if f is None or (f >= horizon and horizon < n):
                stack = tuple((fr["filename"], fr["line"], fr["name"]) for fr in e["frames"])
                total[stack] += e["size"]
                grown[stack].add(w)
    k = len(starts)
    return {st: ((v + k // 2) // k, len(grown[st])) for st, v in total.items()}


@pytest.mark.parametrize("name", ["pp_last_stage_recv_pinned", "loss_accum_no_detach",
                                  "late_onset_leak", "two_devices_recv_leak"])
def test_growth_profile_is_the_survivors_per_window(tmp_path, profile_pb2, scenario, name):
    s = scenario(name)
    prof = Read(decode(profile_pb2, export(tmp_path, s.path, "--growth", "--windows", s.windows)))
    assert prof.types == [("survivors", "bytes"), ("windows_grown", "count")]
    with open(s.path, "rb") as f:
        traces = pickle.load(f)["device_traces"]
    # The windows are the input here: where leakscope cuts them (`windows --json`; the
    # generator's own rule differs on some devices), the survivors are counted here.
    cut = json.loads(subprocess.run(cli() + ["windows", str(s.path), "--windows", s.windows,
                                             "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    starts = {w["device"]: w["starts"] for w in cut["devices"]}
    for d in s.devices:
        assert not [w for w in cut["devices"] if w["device"] == d["device"] and w.get("ends")]
        want = survivors(traces[d["device"]], starts[d["device"]])
        # A stack without frames is one location named for it (its file empty).
        got = {(() if frames == [("", 0, "<no python frame>")] else tuple(frames)): tuple(values)
               for frames, values, lb in prof.samples() if lb["device"] == d["device"]}
        assert got == want
        # The leaking site is there, at the truth's rate in each window it grows in.
        for leak in d["leaks"]:
            rows = [v for st, v in got.items() if site_of(st) == leak["site"]]
            if leak["kind"] == "leak":
                assert rows, leak["site"]


def test_growth_without_windows_to_judge_is_refused(tmp_path, scenario):
    s = scenario("plain_one_step")
    r = subprocess.run(cli() + ["export", str(s.path), "--pprof", str(tmp_path / "g.pb.gz"),
                                "--growth"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "no device has windows to judge growth across" in r.stderr
    assert "--windows" in r.stderr


def test_pprof_takes_one_file(tmp_path):
    f = ROOT / "fixtures" / "scenarios" / "control_no_leak.pickle"
    r = subprocess.run(cli() + ["export", str(f), str(f), "--pprof", str(tmp_path / "x.pb.gz")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "one file" in r.stderr


def test_from_python(tmp_path, profile_pb2, scenario):
    import leakscope

    s = scenario("pp_last_stage_recv_pinned")
    written = leakscope.export_pprof(s.path, tmp_path / "p.pb.gz", at="peak")
    assert written["schema"] == "leakscope.export.pprof/1" and written["profile"] == "live"
    assert written["total"] == s.truth["peak"]["live_requested_bytes"]
    prof = Read(decode(profile_pb2, tmp_path / "p.pb.gz"))
    assert sum(v[0] for _, v, _ in prof.samples()) == s.truth["peak"]["live_requested_bytes"]
    with pytest.raises(ValueError, match="windows"):
        leakscope.export_pprof(scenario("plain_one_step").path, tmp_path / "g.pb.gz", growth=True)
