"""Memory roles in the exports and the Python API: the ``role`` columns of the Parquet
tables, Perfetto's role counters, pprof's ``role`` label, the ``role`` column of
``to_pandas()``, ``by="role"`` and ``roles=``.

Numbers come from CPython's reading of the pickle (the live requested bytes of the final
``segments`` blocks; alloc/free pairs of the trace) and from the scenario generator's
ground truth (``end.by_role``, ``end.by_site``, each leak's ``role``), never from
leakscope's output. The Perfetto and pprof files are decoded with the official
definitions, the Parquet files with DuckDB.
"""

from __future__ import annotations

import gzip
import importlib
import pickle
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import leakscope

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "fixtures" / "scenarios"
#: The built-in roles, as docs/roles.md names them.
BUILT_IN = {"parameter", "gradient", "optimizer_state", "activation", "temporary", "untraced",
            "unknown"}
ACTIVE = {"active_allocated", "active_pending_free", "active_awaiting_free"}
#: Scenarios whose generator truth says the role of every byte live at the end.
BY_ROLE = ["plain_loop_kept_logits", "two_devices_recv_leak"]
ADAM_178 = "/usr/local/lib/python3.12/dist-packages/torch/optim/adam.py:178:_init_group"


def read_pickle(path: Path) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


def segments_live(snap: dict) -> dict:
    """Per device: Σ requested_size of the blocks active in the final segments."""
    out: dict = defaultdict(int)
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] in ACTIVE:
                out[seg.get("device", 0)] += b["requested_size"]
    return dict(out)


def pairs(trace: list) -> dict:
    """Alloc index -> (bytes, free_requested indices, free index or None), by address."""
    out, held = {}, {}
    for i, e in enumerate(trace):
        a, addr = e["action"], e.get("addr")
        if a == "alloc":
            if addr in held:
                out[held.pop(addr)][2] = i  # a lost free: the next alloc ends it
            held[addr] = i
            out[i] = [e["size"], [], None]
        elif a == "free_requested" and addr in held:
            out[held[addr]][1].append(i)
        elif a in ("free_completed", "free") and addr in held:
            out[held.pop(addr)][2] = i
    return out


def truth_by_role(name: str) -> dict:
    """Per device: {role: bytes live at the end}, from the generator."""
    import json

    t = json.loads((SCENARIOS / f"{name}.truth.json").read_text())
    devices = t.get("devices", [t])
    return {d.get("device", 0): {r: v["bytes"] for r, v in d["end"]["by_role"].items()
                                 if v["bytes"]}
            for d in devices}


def truth(name: str) -> dict:
    import json

    return json.loads((SCENARIOS / f"{name}.truth.json").read_text())


@pytest.fixture
def adam_roles(tmp_path) -> Path:
    """A ``[roles]`` file naming the first Adam moment (allocated at adam.py:178)."""
    p = tmp_path / "roles.toml"
    p.write_text("[roles]\n'adam\\.py:178:_init_group' = 'exp_avg'\n")
    return p


# Parquet --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def duck():
    return pytest.importorskip("duckdb", reason="duckdb is not installed (pip install duckdb)")


def export_tables(duck, tmp_path: Path, name: str, **kw):
    out = tmp_path / "tables"
    written = leakscope.export_parquet(SCENARIOS / f"{name}.pickle", out, **kw)
    con = duck.connect()
    for t in written["tables"]:
        con.execute(f"create view {t['table']} as select * from read_parquet('{t['path']}')")
    return con


def test_parquet_events_carry_their_allocations_role(duck, tmp_path):
    name = "plain_loop_kept_logits"
    snap = read_pickle(SCENARIOS / f"{name}.pickle")
    con = export_tables(duck, tmp_path, name)
    for d, trace in enumerate(snap["device_traces"]):
        if not trace:
            continue
        rows = con.execute("select idx, action, role from events where device = ? order by idx",
                           [d]).fetchall()
        assert len(rows) == len(trace)
        role = [r[2] for r in rows]
        for i, e in enumerate(trace):
            if e["action"].startswith("segment_") or e["action"] == "oom":
                assert role[i] is None, (i, e["action"])
        live = defaultdict(int)
        for a, (size, requests, freed) in pairs(trace).items():
            assert role[a] in BUILT_IN, (a, role[a])
            for j in requests:
                assert role[j] == role[a], (a, j)
            if freed is not None and trace[freed]["action"] != "alloc":
                assert role[freed] == role[a], (a, freed)
            if freed is None:
                live[role[a]] += size
        # What the trace shows alive at the end, by the role of its alloc event; the
        # blocks it does not show being made are the truth's untraced bytes.
        want = truth_by_role(name)[d]
        untraced = segments_live(snap)[d] - sum(live.values())
        assert untraced == want.get("untraced", 0)
        live["untraced"] += untraced
        assert {r: b for r, b in live.items() if b} == want


def test_parquet_top_sites_and_suspects_name_a_role(duck, tmp_path):
    name = "plain_loop_kept_logits"
    snap = read_pickle(SCENARIOS / f"{name}.pickle")
    con = export_tables(duck, tmp_path, name)
    rows = con.execute("select device, point, label, role, bytes from top_sites").fetchall()
    assert rows
    assert all(r[3] in BUILT_IN for r in rows), {r[3] for r in rows}
    end = defaultdict(int)
    for d, point, _, _, b in rows:
        if point == "end":
            end[d] += b
    assert dict(end) == segments_live(snap)
    t = truth(name)
    for leak in t["leaks"]:
        (role,) = con.execute("select role from top_sites where point = 'end' and label = ?",
                              [leak["site"]]).fetchone()
        assert role == leak["role"]
        (role,) = con.execute("select role from suspects where label = ?",
                              [leak["site"]]).fetchone()
        assert role == leak["role"]
    assert all(r[0] in BUILT_IN for r in con.execute("select role from suspects").fetchall())


def test_parquet_takes_a_roles_file(duck, tmp_path, adam_roles):
    con = export_tables(duck, tmp_path, "plain_loop_kept_logits", roles=adam_roles)
    (role,) = con.execute("select distinct role from top_sites where label = ?",
                          [ADAM_178]).fetchone()
    assert role == "exp_avg"
    got = con.execute("select count(*) from events where role = 'exp_avg' and action = 'alloc'"
                      ).fetchone()[0]
    assert got == truth("plain_loop_kept_logits")["end"]["by_site"][ADAM_178]["blocks"]


# Perfetto -------------------------------------------------------------------------------


def role_counters(path: Path) -> dict:
    """Per process name and device: {role: [values in file order]} of the role counters."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    trace = pb.Trace()
    trace.ParseFromString(data)
    tracks, events = {}, defaultdict(list)
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        elif p.HasField("track_event"):
            events[p.track_event.track_uuid].append(p.track_event.counter_value)
    out: dict = defaultdict(dict)
    for t in tracks.values():
        if t.HasField("counter") and t.name.startswith("role: "):
            device = tracks[t.parent_uuid].name
            out[device][t.name[len("role: "):]] = events[t.uuid]
    return dict(out)


@pytest.mark.parametrize("name", BY_ROLE)
def test_perfetto_role_counters_end_at_the_truths_bytes(tmp_path, name):
    path = SCENARIOS / f"{name}.pickle"
    snap = read_pickle(path)
    out = tmp_path / "t.perfetto-trace"
    leakscope.export_perfetto(path, out)
    got = role_counters(out)
    live = segments_live(snap)
    for d, want in truth_by_role(name).items():
        roles = got[f"device {d}"]
        assert set(roles) <= BUILT_IN
        end = {r: v[-1] for r, v in roles.items() if v[-1]}
        assert sum(end.values()) == live[d]
        assert end == want


def test_perfetto_role_counters_add_up_to_the_live_bytes_before_the_first_event(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "expected"))
    try:
        import replay_points
    finally:
        sys.path.pop(0)
    path = SCENARIOS / "fragmentation_oom.pickle"
    snap = read_pickle(path)
    out = tmp_path / "t.perfetto-trace.gz"
    leakscope.export_perfetto(path, out)
    got = role_counters(out)
    for d, trace in enumerate(snap["device_traces"]):
        if not trace:
            continue
        req0, _, _, requested = replay_points.series(snap, d, trace)
        roles = got[f"device {d}"]
        assert sum(v[0] for v in roles.values()) == req0
        assert sum(v[-1] for v in roles.values()) == requested[-1]
        assert all(max(v) <= max([req0] + requested) for v in roles.values())


def test_perfetto_takes_a_roles_file(tmp_path, adam_roles):
    out = tmp_path / "t.perfetto-trace"
    leakscope.export_perfetto(SCENARIOS / "plain_loop_kept_logits.pickle", out, roles=adam_roles)
    roles = role_counters(out)["device 0"]
    t = truth("plain_loop_kept_logits")
    assert roles["exp_avg"][-1] == t["end"]["by_site"][ADAM_178]["bytes"]
    assert roles["optimizer_state"][-1] == (t["end"]["by_role"]["optimizer_state"]["bytes"]
                                            - t["end"]["by_site"][ADAM_178]["bytes"])


# pprof ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def profile_pb2(tmp_path_factory):
    protoc = pytest.importorskip("grpc_tools.protoc")
    out = tmp_path_factory.mktemp("pprof_proto_roles")
    protos = ROOT / "python" / "tests" / "protos"
    assert protoc.main(["protoc", f"-I{protos}", f"--python_out={out}",
                        str(protos / "profile.proto")]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("profile_pb2")
    finally:
        sys.path.remove(str(out))


def pprof_samples(profile_pb2, path: Path):
    """(values, {numeric labels}, [(key, string) labels]) per sample."""
    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress(path.read_bytes()))
    s = p.string_table
    for smp in p.sample:
        nums = {s[lb.key]: lb.num for lb in smp.label if not lb.str}
        strs = [(s[lb.key], s[lb.str]) for lb in smp.label if lb.str]
        yield list(smp.value), nums, strs


@pytest.mark.parametrize("name", BY_ROLE)
def test_pprof_role_labels(tmp_path, profile_pb2, name):
    path = SCENARIOS / f"{name}.pickle"
    out = tmp_path / "p.pb.gz"
    leakscope.export_pprof(path, out)
    by = defaultdict(lambda: defaultdict(int))
    for values, nums, strs in pprof_samples(profile_pb2, out):
        assert len(strs) == 1 and strs[0][0] == "role" and strs[0][1] in BUILT_IN, strs
        by[nums["device"]][strs[0][1]] += values[0]
    live = segments_live(read_pickle(path))
    for d, want in truth_by_role(name).items():
        assert sum(by[d].values()) == live[d]
        assert dict(by[d]) == want


def test_pprof_growth_samples_name_the_leaks_role(tmp_path, profile_pb2):
    name = "plain_loop_kept_logits"
    out = tmp_path / "g.pb.gz"
    leakscope.export_pprof(SCENARIOS / f"{name}.pickle", out, growth=True)
    roles = [strs for _, _, strs in pprof_samples(profile_pb2, out)]
    assert roles and all(len(s) == 1 and s[0][0] == "role" and s[0][1] in BUILT_IN
                         for s in roles)
    assert ("role", truth(name)["leaks"][0]["role"]) in {s[0] for s in roles}


def test_pprof_takes_a_roles_file(tmp_path, profile_pb2, adam_roles):
    out = tmp_path / "p.pb.gz"
    leakscope.export_pprof(SCENARIOS / "plain_loop_kept_logits.pickle", out, roles=adam_roles)
    got = sum(v[0] for v, _, s in pprof_samples(profile_pb2, out) if s == [("role", "exp_avg")])
    assert got == truth("plain_loop_kept_logits")["end"]["by_site"][ADAM_178]["bytes"]


# Python API -----------------------------------------------------------------------------


def test_to_pandas_has_a_role_column():
    pytest.importorskip("pandas")
    name = "plain_loop_kept_logits"
    snap = leakscope.load(SCENARIOS / f"{name}.pickle")
    t = truth(name)
    for result in (snap.top(), snap.leaks(), snap.oom()):
        df = result.to_pandas()
        assert "role" in df.columns, result.command
        assert len(df) and df["role"].isin(BUILT_IN).all(), (result.command, set(df["role"]))
    top = snap.top(limit=100).to_pandas()
    for leak in t["leaks"]:
        assert top[top.site == leak["site"]].role.tolist() == [leak["role"]]
        leaks = snap.leaks().to_pandas()
        assert leaks[leaks.site == leak["site"]].role.tolist() == [leak["role"]]
    other = SCENARIOS / "plain_loop_control.pickle"
    assert "role" in leakscope.compare(other, snap).to_pandas().columns


@pytest.mark.parametrize("name", BY_ROLE)
def test_by_role(name):
    snap = leakscope.load(SCENARIOS / f"{name}.pickle")
    got = defaultdict(dict)
    for r in snap.top(by="role", limit=100).rows():
        got[r["device"]][r["site"]] = r["bytes"]
        assert r["role"] == r["site"]
    for d, want in truth_by_role(name).items():
        assert got[d] == want
    tree = snap.tree(by="role").to_dict()["devices"][0]["root"]
    assert {c["name"] for c in tree["children"]} <= BUILT_IN | {"<untraced>"}
    with pytest.raises(ValueError, match="role"):
        snap.tree(by="stack")
    with pytest.raises(ValueError, match="by"):
        snap.top(by="colour")
    assert snap.leaks(by="role").to_dict()["devices"]
    assert snap.report(by="role").to_dict()["devices"]


def test_roles_keyword(tmp_path, adam_roles):
    name = "plain_loop_kept_logits"
    snap = leakscope.load(SCENARIOS / f"{name}.pickle")
    t = truth(name)
    adam = t["end"]["by_site"][ADAM_178]["bytes"]
    rows = {r["site"]: r["bytes"] for r in snap.top(by="role", roles=adam_roles).rows()}
    assert rows["exp_avg"] == adam
    assert rows["optimizer_state"] == t["end"]["by_role"]["optimizer_state"]["bytes"] - adam
    top = {r["site"]: r["role"] for r in snap.top(limit=100, roles=adam_roles).rows()}
    assert top[ADAM_178] == "exp_avg"
    for call in (lambda: snap.leaks(roles=adam_roles), lambda: snap.oom(roles=adam_roles),
                 lambda: snap.tree(by="role", roles=adam_roles),
                 lambda: snap.report(roles=adam_roles),
                 lambda: leakscope.compare(snap, snap, roles=adam_roles)):
        assert call().to_dict()
    # check: the budget's built-in role is what the [roles] file leaves it.
    budget = "[memory]\npeak_requested.optimizer_state = \"600 MiB\"\n"
    assert not leakscope.check(snap, budget).passed
    r = leakscope.check(snap, budget, roles=adam_roles)
    (case,) = [c for c in r.rows() if c["name"] == "memory.peak_requested.optimizer_state"]
    assert case["passed"] and case["value"] == (
        t["end"]["by_role"]["optimizer_state"]["bytes"] - adam)
    bad = tmp_path / "bad.toml"
    bad.write_text("[roles]\n'(' = 'x'\n")
    with pytest.raises(ValueError, match="regular expression"):
        snap.top(roles=bad)
    with pytest.raises(OSError):
        snap.top(roles=tmp_path / "missing.toml")
