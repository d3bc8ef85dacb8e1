"""`leakscope export --perfetto`, decoded with Perfetto's official definitions.

The trace is read with ``perfetto_trace_pb2`` from the ``perfetto`` package (compiled from
``protos/perfetto/trace/perfetto_trace.proto``), never with leakscope's encoder. Numbers
are checked against bookkeeping done here from CPython's ``pickle`` (the replay of
``tests/expected/replay_points.py``) and against the scenario generator's ground truth.
Perfetto's trace processor (SQL) is not run: it downloads a binary at run time.
"""

from __future__ import annotations

import gzip
import pickle
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from cli import ROOT, cli

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
sys.path.insert(0, str(ROOT / "tests" / "expected"))
import replay_points  # noqa: E402

SCENARIOS = sorted((ROOT / "fixtures" / "scenarios").glob("*.pickle"))
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4


def export(tmp_path: Path, *inputs, name="out.perfetto-trace", extra=()) -> Path:
    out = tmp_path / name
    r = subprocess.run(cli() + ["export", *map(str, inputs), "--perfetto", str(out), *extra],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


class Decoded:
    """A trace's tracks (by uuid) and events (by track, in file order)."""

    def __init__(self, path: Path):
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        trace = pb.Trace()
        trace.ParseFromString(data)
        self.tracks = {}
        self.events = defaultdict(list)
        self.metadata = {}
        for p in trace.packet:
            if p.HasField("track_descriptor"):
                self.tracks[p.track_descriptor.uuid] = p.track_descriptor
            elif p.HasField("track_event"):
                self.events[p.track_event.track_uuid].append((p.timestamp, p.track_event))
            elif p.HasField("chrome_events"):
                for m in p.chrome_events.metadata:
                    self.metadata[m.name] = m.string_value

    def children(self, uuid: int):
        return [t for t in self.tracks.values() if t.parent_uuid == uuid and t.uuid != uuid]

    def processes(self):
        return [t for t in self.tracks.values() if t.HasField("process")]

    def device(self, process, name: str):
        (d,) = [t for t in self.children(process.uuid) if t.name == name]
        return d

    def counter(self, device, needle: str):
        (c,) = [t for t in self.children(device.uuid)
                if t.HasField("counter") and needle in t.name]
        return [e.counter_value for _, e in self.events[c.uuid]]

    def instants(self, device):
        return [(ts, e) for t in self.children(device.uuid)
                for ts, e in self.events[t.uuid] if e.type == TYPE_INSTANT]

    def slice_tracks(self, device):
        return [t for t in self.children(device.uuid)
                if any(e.type == TYPE_SLICE_BEGIN for _, e in self.events[t.uuid])]


def truth_series(path: Path):
    """Per device: requested/reserved before the first event and after each, by
    bookkeeping from CPython's reading of the file."""
    with open(path, "rb") as f:
        snap = pickle.load(f)
    out = {}
    for d, trace in enumerate(snap["device_traces"]):
        if trace:
            out[d] = replay_points.series(snap, d, trace)
    return out


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_counters_keep_the_exact_peaks(tmp_path, path):
    t = Decoded(export(tmp_path, path))
    (proc,) = t.processes()
    for d, (req0, res0, reserved, requested) in truth_series(path).items():
        dev = t.device(proc, f"device {d}")
        live = t.counter(dev, "live")
        assert max(live) == max([req0] + requested)
        assert live[0] == req0
        assert max(t.counter(dev, "reserved")) == max([res0] + reserved)
        # The sites and "other" stack up to the live bytes where all are sampled at once:
        # before the first event.
        sites = [c for c in t.children(dev.uuid) if c.HasField("counter") and "site" in c.name]
        if sites:
            assert sum(t.events[c.uuid][0][1].counter_value for c in sites) == req0
        # Every counter point lies between the extremes the replay reaches.
        assert min(live) >= min([req0] + requested)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_slices_nest_on_every_track(tmp_path, path):
    t = Decoded(export(tmp_path, path))
    for uuid, events in t.events.items():
        stack = []
        last = -1
        for ts, e in sorted(events, key=lambda x: x[0]):  # stable: file order within a time
            assert ts >= last or e.type == TYPE_COUNTER
            if e.type == TYPE_SLICE_BEGIN:
                assert e.name
                stack.append(ts)
                last = ts
            elif e.type == TYPE_SLICE_END:
                assert stack, f"an end without a begin on {t.tracks[uuid].name}"
                assert ts >= stack.pop()
                last = ts
        assert not stack, f"slices left open on {t.tracks[uuid].name}"


def test_the_pipeline_leak_shows_its_onset_and_its_windows(tmp_path, scenario):
    s = scenario("pp_last_stage_recv_pinned")
    t = Decoded(export(tmp_path, s.path, extra=["--windows", s.windows]))
    (proc,) = t.processes()
    dev = t.device(proc, "device 0")
    truth = [leak for leak in s.leaks if leak.function == "create_tensor_recv_prev"][0]
    onsets = {e.name: e for _, e in t.instants(dev) if "onset" in e.name}
    name = f"{truth.kind} onset: create_tensor_recv_prev"
    assert name in onsets, sorted(onsets)
    args = {a.name: a for a in onsets[name].debug_annotations}
    assert args["bytes_per_window"].uint_value == truth.rate
    assert args["site"].string_value == truth.site
    # One slice per window of the generator, named after the windows it covers.
    windows = s.devices[0]["windows"]
    (track,) = [x for x in t.slice_tracks(dev) if x.name.startswith("windows")]
    begins = [(ts, e) for ts, e in t.events[track.uuid] if e.type == TYPE_SLICE_BEGIN]
    assert len(begins) == windows["count"]
    # The onset instant sits at the start of the onset window.
    onset_ts = [ts for ts, e in t.instants(dev) if e.name == name][0]
    assert onset_ts == begins[truth.onset_window][0]
    peak = [e for _, e in t.instants(dev) if e.name.startswith("peak")][0]
    peak_args = {a.name: a.uint_value for a in peak.debug_annotations}
    assert peak_args["live_bytes"] == s.truth["peak"]["live_requested_bytes"]
    assert peak_args["event_index"] == s.truth["peak"]["event_index"]


def test_the_oom_is_an_instant_where_it_happened(tmp_path, scenario):
    s = scenario("fragmentation_oom")
    t = Decoded(export(tmp_path, s.path))
    (proc,) = t.processes()
    with open(s.path, "rb") as f:
        snap = pickle.load(f)
    for d, trace in enumerate(snap["device_traces"]):
        ooms = [e for e in trace if e["action"] == "oom"]
        if not ooms:
            continue
        dev = t.device(proc, f"device {d}")
        got = [e for _, e in t.instants(dev) if e.name.startswith("OOM")]
        assert len(got) == len(ooms)
        args = {a.name: a.uint_value for a in got[0].debug_annotations}
        assert args["requested_size"] == ooms[0]["size"]
        assert args["event_index"] == trace.index(ooms[0])


def test_record_function_ranges_are_slices(tmp_path, scenario):
    s = scenario("late_onset_leak")
    with open(s.path, "rb") as f:
        anns = pickle.load(f)["external_annotations"]
    t = Decoded(export(tmp_path, s.path))
    (proc,) = t.processes()
    dev = t.device(proc, "device 0")
    tracks = [x for x in t.slice_tracks(dev) if x.name.startswith("record_function")]
    names = [e.name for x in tracks for _, e in t.events[x.uuid] if e.type == TYPE_SLICE_BEGIN]
    starts = [a for a in anns if a["stage"] == "START" and a.get("device", 0) in (0, None)]
    assert sorted(names) == sorted(a["name"] for a in starts)
    # On the time_us axis a range starts at its annotation's time.
    first = min(starts, key=lambda a: a["time_us"])
    ts = min(ts for x in tracks for ts, e in t.events[x.uuid] if e.type == TYPE_SLICE_BEGIN)
    assert ts == first["time_us"] * 1000
    assert t.metadata["leakscope.timebase"].startswith("time_us")


def test_ranks_share_one_timeline(tmp_path):
    run = ROOT / "fixtures" / "scenarios" / "verl_ranks"
    files = sorted(p for p in run.rglob("*") if p.suffix in (".pickle", ".pkl"))
    t = Decoded(export(tmp_path, run, name="run.perfetto-trace.gz"))
    procs = t.processes()
    assert len(procs) == len(files)
    assert len({p.process.pid for p in procs}) == len(procs)
    assert all(p.name.startswith("rank ") for p in procs)
    for p in procs:
        path = Path(p.name.split(": ", 1)[1])
        assert path.resolve() in [f.resolve() for f in files], p.name
        for d, (req0, _, _, requested) in truth_series(path).items():
            assert max(t.counter(t.device(p, f"device {d}"), "live")) == max([req0] + requested)


def test_untimed_files_use_the_event_index_and_say_so(tmp_path, scenario):
    s = scenario("npu_shaped")  # MemSnapDump-shaped: no time_us
    t = Decoded(export(tmp_path, s.path))
    assert t.metadata["leakscope.timebase"].startswith("event index")
    (proc,) = t.processes()
    (req0, _, _, requested) = truth_series(s.path)[0]
    dev = t.device(proc, "device 0")
    c = [x for x in t.children(dev.uuid) if x.HasField("counter") and "live" in x.name][0]
    # Event i is drawn at (i + 1) microseconds: the peak's point is at its event.
    peak_event = max(range(len(requested)), key=lambda i: (requested[i], -i))
    ts = [ts for ts, e in t.events[c.uuid] if e.counter_value == requested[peak_event]]
    assert (peak_event + 1) * 1000 in ts


def test_the_size_is_bounded_whatever_the_trace(tmp_path):
    """400,000 events that each move the live bytes and 80,000 micro-batch ranges: the
    counters keep at most two points per bucket (5,000 buckets per device), the slices stay
    within their budget (60,000 in all), and the peak is still exact."""
    n_batches, per_batch = 80_000, 5
    trace, anns, t = [], [], 1_000_000
    live = []
    for b in range(n_batches):
        anns.append({"stage": "START", "name": f"micro_batch{b}", "device": 0, "time_us": t})
        addrs = []
        for k in range(per_batch):
            a = 0x7f0000000000 + ((b * per_batch + k) % 64) * (1 << 22)
            size = 512 * (1 + (b * 7 + k * 13) % 4096)
            trace.append({"action": "alloc", "addr": a, "size": size, "stream": 0,
                          "time_us": t, "frames": []})
            addrs.append((a, size))
            t += 1
        for a, size in addrs[:-1]:
            trace.append({"action": "free_completed", "addr": a, "size": size, "stream": 0,
                          "time_us": t, "frames": []})
            t += 1
        anns.append({"stage": "END", "name": f"micro_batch{b}", "device": 0, "time_us": t})
        a, size = addrs[-1]
        trace.append({"action": "free_completed", "addr": a, "size": size, "stream": 0,
                      "time_us": t, "frames": []})
        t += 1
    snap = {"segments": [{"device": 0, "address": 0x7f0000000000, "total_size": 64 << 22,
                          "allocated_size": 0, "active_size": 0, "requested_size": 0,
                          "stream": 0, "segment_type": "large",
                          "blocks": [{"address": 0x7f0000000000, "size": 64 << 22,
                                      "requested_size": 0, "state": "inactive"}]}],
            "device_traces": [trace], "external_annotations": anns}
    path = tmp_path / "big.pickle"
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    out = export(tmp_path, path)
    assert out.stat().st_size < 20 * 1024 * 1024
    t = Decoded(out)
    (proc,) = t.processes()
    dev = t.device(proc, "device 0")
    for c in t.children(dev.uuid):
        if c.HasField("counter"):
            assert len(t.events[c.uuid]) <= 2 * 5_000 + 1, c.name
    slices = sum(1 for x in t.slice_tracks(dev) for _, e in t.events[x.uuid]
                 if e.type == TYPE_SLICE_BEGIN)
    assert 0 < slices <= 60_000
    (req0, _, _, requested) = truth_series(path)[0]
    assert max(t.counter(dev, "live")) == max([req0] + requested)


def test_from_python(tmp_path, scenario):
    import leakscope

    s = scenario("two_devices_recv_leak")
    written = leakscope.export_perfetto([s.path], tmp_path / "t.perfetto-trace.gz")
    assert written["schema"] == "leakscope.export.perfetto/1"
    assert written["devices"] == 2 and written["timebase"] == "time_us"
    t = Decoded(tmp_path / "t.perfetto-trace.gz")
    (proc,) = t.processes()
    for d, (req0, _, _, requested) in truth_series(s.path).items():
        assert max(t.counter(t.device(proc, f"device {d}"), "live")) == max([req0] + requested)
    with pytest.raises(leakscope.ReadError) as e:
        leakscope.export_perfetto(tmp_path / "missing.pickle", tmp_path / "x.perfetto-trace")
    assert isinstance(e.value, OSError) and e.value.kind == "io"


def test_top_sites_sets_how_many_sites_get_a_counter(tmp_path, scenario):
    s = scenario("pp_last_stage_recv_pinned")
    t = Decoded(export(tmp_path, s.path, extra=["--top-sites", "3"]))
    (proc,) = t.processes()
    dev = t.device(proc, "device 0")
    sites = [c.name for c in t.children(dev.uuid) if c.HasField("counter") and "site" in c.name]
    assert len(sites) == 4 and sites[-1] == "site: other"
    # The three largest at the peak, largest first, as the generator's bookkeeping has them.
    by_site = s.truth["peak"]["by_site"]
    want = sorted(by_site, key=lambda k: (-by_site[k]["bytes"], k))[:3]
    assert [n.split(": ", 1)[1] for n in sites[:3]] == want


LEAKING = ["pp_last_stage_recv_pinned", "loss_accum_no_detach", "late_onset_leak",
           "two_devices_recv_leak", "plain_loop_kept_logits", "wrapped_ring_buffer"]


@pytest.mark.parametrize("name", LEAKING)
def test_every_leak_of_the_truth_has_its_onset_instant(tmp_path, scenario, name):
    s = scenario(name)
    if not s.leaks:
        pytest.skip("no leak in this scenario's truth")
    t = Decoded(export(tmp_path, s.path, extra=["--windows", s.windows]))
    (proc,) = t.processes()
    for leak in s.leaks:
        dev = t.device(proc, f"device {leak.device}")
        label = leak.function or leak.site
        found = [e for _, e in t.instants(dev) if e.name == f"{leak.kind} onset: {label}"]
        rates = [{a.name: a for a in e.debug_annotations}["bytes_per_window"].uint_value
                 for e in found
                 if {a.name: a for a in e.debug_annotations}["site"].string_value == leak.site]
        assert rates == [leak.rate], (leak, [e.name for _, e in t.instants(dev)])
