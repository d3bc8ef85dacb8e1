"""leakscope.ray on a real Ray cluster of two nodes on this machine (loopback only).

The run's report must be the command line's ``leakscope ranks DIR --json``; the leaking
rank and its figures come from the fixture's generator (``verl_ranks/truth.json``). Faults
are made inside the tasks: the analysis is swapped (``monkeypatch``) for a function defined
in the test, which Ray ships to the workers by value, and which raises, exits the worker
process or hangs on one file or one node.

Both nodes of a cluster on one machine see the same files (a shared file system): each
file must be analysed once, the work spread over both.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# Read when Ray is imported: without it Ray swaps 127.0.0.1 for the host's external address.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'leakscope[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils")

import leakscope  # noqa: E402
import leakscope.ray as lray  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VERL_REL = "fixtures/scenarios/verl_ranks"
VERL = ROOT / VERL_REL
TRUTH = json.loads((VERL / "truth.json").read_text())
# Per-file figures: everything a row says of its own file (outliers depend on the others).
OWN = ("rank", "step", "file", "device", "peak_requested_bytes", "end_allocated_bytes",
       "growth_bytes_per_window", "top_suspect", "top_suspect_bytes_per_window", "windows",
       "verdicts", "disagrees", "error")


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node of 2 CPUs each, on 127.0.0.1, this process its driver."""
    from ray._private import ray_constants
    ray_constants.ENABLE_RAY_CLUSTER = False  # as above, when Ray was imported earlier
    c = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "node_ip_address": "127.0.0.1"})
    try:
        assert c.address.startswith("127.0.0.1:"), f"the cluster left loopback: {c.address}"
        c.add_node(num_cpus=2, node_ip_address="127.0.0.1")
        ray.init(address=c.address, _node_ip_address="127.0.0.1", log_to_driver=False)
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture
def at_root(monkeypatch):
    """The repository as the working directory (the fixture's relative path)."""
    monkeypatch.chdir(ROOT)


def cli_ranks(directory: str) -> dict:
    """What the installed command prints for ``leakscope ranks DIR --json`` (run here)."""
    out = subprocess.run([sys.executable, "-m", "leakscope", "ranks", directory, "--json"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def own(row: dict) -> dict:
    return {k: row[k] for k in OWN}


def by_file(report: dict) -> dict:
    return {(r["file"], r["device"]): r for r in report["ranks"]}


def alive_nodes() -> list:
    return [n["NodeID"] for n in ray.nodes() if n["Alive"]]


def test_report_is_the_command_lines_and_flags_the_leaking_rank(cluster, at_root):
    seen = []
    r = lray.ranks(VERL_REL, progress=seen.append)
    assert r.to_dict() == cli_ranks(VERL_REL)
    assert r.schema == "leakscope.ranks/5"

    rows = r.to_dict()["ranks"]
    steps = {str(s) for s in TRUTH["steps"]}
    ranks = set(int(k) for k in TRUTH["growth_per_micro_batch_bytes"])
    assert {(x["rank"], x["step"]) for x in rows} == {(k, s) for k in ranks for s in steps}
    assert {x["rank"] for x in rows if x["outlier"]} == set(TRUTH["leaking_ranks"])
    leak_sites = {s["site"] for s in TRUTH["leak"]["sites"]}
    for x in rows:
        assert x["end_allocated_bytes"] == \
            TRUTH["end_allocated_bytes_by_rank_step"][f"rank{x['rank']}_step{x['step']}"]
        if x["verdicts"]:
            assert x["growth_bytes_per_window"] == \
                TRUTH["growth_per_micro_batch_bytes"][str(x["rank"])]
        if x["outlier"]:
            assert x["top_suspect"]["label"] in leak_sites

    # One progress report per file, the last one counting them all.
    assert len(seen) == len(r.files) and seen[-1].done == seen[-1].total == len(r.files)
    assert all(p.error is None for p in seen)
    # Kilobytes per file reach the driver (its rows and top suspects), never the snapshot.
    assert all(0 < f.bytes_returned < 16 * 1024 for f in r.files)
    # Pickled whole: the report and how the cluster made it.
    back = pickle.loads(pickle.dumps(r))
    assert type(back) is lray.ClusterRanks and back.to_dict() == r.to_dict()
    assert (str(back), back.files, back.nodes) == (str(r), r.files, r.nodes)


def test_absolute_root_and_windows_option(cluster):
    root = str(VERL) + "/"
    assert lray.ranks(root, progress=False).to_dict() == leakscope.ranks(root).to_dict()
    spec = "every:50"
    assert lray.ranks(VERL, windows=spec, progress=False).to_dict() == \
        leakscope.ranks(VERL, windows=spec).to_dict()
    with pytest.raises(ValueError, match="windows"):
        lray.ranks(VERL, windows="no-such-spec", progress=False)


def test_missing_directory(cluster, tmp_path):
    with pytest.raises(ValueError, match="is not a directory"):
        lray.ranks(tmp_path / "absent", progress=False)
    with pytest.raises(ValueError, match="no snapshot files"):
        lray.ranks(tmp_path, progress=False)


@pytest.mark.parametrize("shared_fs", [None, True])
def test_shared_file_system_each_file_once_on_both_nodes(cluster, monkeypatch, tmp_path,
                                                        shared_fs):
    log = tmp_path / "analysed.log"

    def logged(found, prefix, opts, threads):
        import ray as ray_
        from leakscope.ray import _analyse_one
        with open(log, "a") as out:  # one short line per write: appends do not interleave
            out.write(json.dumps([found["file"], ray_.get_runtime_context().get_node_id()]) + "\n")
        return _analyse_one(found, prefix, opts, threads)

    monkeypatch.setattr(lray, "_analyse_one", logged)
    r = lray.ranks(VERL, shared_fs=shared_fs, progress=False)
    assert r.shared_fs
    assert r.to_dict() == leakscope.ranks(VERL).to_dict()

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    files = [f for f, _ in calls]
    assert sorted(files) == sorted(set(files)), "a file was analysed twice"
    listed = leakscope._native.list_here(str(VERL), "")["files"]
    assert sorted(files) == sorted(f["file"] for f in listed)
    assert {n for _, n in calls} == set(alive_nodes()), "the work went to one node only"
    assert {f.node_id for f in r.files} == {n for _, n in calls}


def test_max_per_node_bounds_the_files_in_flight(cluster, monkeypatch, tmp_path):
    def slow(found, prefix, opts, threads):
        import fcntl
        import ray as ray_
        from leakscope.ray import _analyse_one
        node = ray_.get_runtime_context().get_node_id()
        running = tmp_path / f"running.{node}"
        with open(tmp_path / "lock", "a") as lock:  # count this node's tasks in flight
            fcntl.flock(lock, fcntl.LOCK_EX)
            n = int(running.read_text() or 0) if running.exists() else 0
            running.write_text(str(n + 1))
            with open(tmp_path / "peaks", "a") as peaks:
                peaks.write(f"{node} {n + 1}\n")
        time.sleep(0.3)
        with open(tmp_path / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            running.write_text(str(int(running.read_text()) - 1))
        return _analyse_one(found, prefix, opts, threads)

    monkeypatch.setattr(lray, "_analyse_one", slow)
    r = lray.ranks(VERL, max_per_node=1, progress=False)
    assert r.to_dict() == leakscope.ranks(VERL).to_dict()
    peaks = [int(line.split()[1]) for line in (tmp_path / "peaks").read_text().splitlines()]
    assert len(peaks) == len(r.files) and max(peaks) == 1
    with pytest.raises(ValueError, match="max_per_node"):
        lray.ranks(VERL, max_per_node=0, progress=False)


def _victim(report: dict) -> str:
    """The step-2 file of the leaking rank: the one the faults hit."""
    rank = TRUTH["leaking_ranks"][0]
    (row,) = [x for x in report["ranks"] if x["rank"] == rank and x["step"] == "2"]
    return row["file"]


def _check_one_lost(r, expected: dict, victim: str, error_start: str) -> None:
    got = by_file(r.to_dict())
    (bad,) = [x for x in r.to_dict()["ranks"] if x["error"]]
    assert bad["file"] == victim and bad["error"].startswith(error_start), bad["error"]
    want = next(x for x in expected["ranks"] if x["file"] == victim)
    assert (bad["rank"], bad["step"], bad["device"]) == (want["rank"], want["step"], None)
    assert bad["end_allocated_bytes"] == 0 and not bad["outlier"]
    # Every other file's row is intact.
    others = [x for x in expected["ranks"] if x["file"] != victim]
    assert len(got) == len(others) + 1
    for x in others:
        assert own(got[(x["file"], x["device"])]) == own(x)
    (run,) = [f for f in r.files if f.file == victim]
    assert run.error == bad["error"]


def test_a_task_that_raises_is_reported_on_its_file(cluster, monkeypatch, tmp_path):
    expected = leakscope.ranks(VERL).to_dict()
    victim = _victim(expected)

    def raising(found, prefix, opts, threads):
        from leakscope.ray import _analyse_one
        if found["file"] == victim:
            raise RuntimeError("disk went away\nsecond line")
        return _analyse_one(found, prefix, opts, threads)

    monkeypatch.setattr(lray, "_analyse_one", raising)
    seen = []
    r = lray.ranks(VERL, progress=seen.append)
    _check_one_lost(r, expected, victim, "ray: RuntimeError: disk went away")
    assert "second line" not in r.files[[f.file for f in r.files].index(victim)].error
    assert [p.error for p in seen if p.file == victim] == ["ray: RuntimeError: disk went away"]


def test_a_worker_that_dies_is_reported_on_its_file(cluster, monkeypatch):
    expected = leakscope.ranks(VERL).to_dict()
    victim = _victim(expected)

    def dying(found, prefix, opts, threads):
        from leakscope.ray import _analyse_one
        if found["file"] == victim:
            os._exit(1)
        return _analyse_one(found, prefix, opts, threads)

    monkeypatch.setattr(lray, "_analyse_one", dying)
    r = lray.ranks(VERL, progress=False)
    _check_one_lost(r, expected, victim, "ray: WorkerCrashedError: ")
    assert len(alive_nodes()) == 2


def _run_while(target, remove) -> object:
    """Runs ``target`` in a thread, calls ``remove`` once it is under way, returns what
    ``target`` returned (or raises what it raised)."""
    out = {}

    def run():
        try:
            out["value"] = target()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    remove()
    t.join(timeout=240)
    assert not t.is_alive(), "ranks() did not return after the node was lost"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _third_node(cluster):
    before = set(alive_nodes())
    node = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    (node_id,) = set(alive_nodes()) - before
    return node, node_id


def _wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_files_only_a_lost_node_holds_are_reported_lost(cluster, monkeypatch, tmp_path):
    """Node-local disks: a third node alone holds the victim; it is removed while
    analysing it. The victim's row carries the error, every other row is intact."""
    expected = leakscope.ranks(VERL).to_dict()
    victim = _victim(expected)
    node, doomed = _third_node(cluster)
    started = tmp_path / "started"

    def listing(root_abs, prefix):
        import ray as ray_
        from leakscope.ray import _list_node
        here = ray_.get_runtime_context().get_node_id()
        out = _list_node(root_abs, prefix)
        keep = (lambda f: f == victim) if here == doomed else (lambda f: f != victim)
        out["files"] = [f for f in out["files"] if keep(f["file"])]
        if here == doomed:
            out["skipped"], out["skipped_files"] = 0, []
        return out

    def hanging(found, prefix, opts, threads):
        import ray as ray_
        from leakscope.ray import _analyse_one
        if ray_.get_runtime_context().get_node_id() == doomed:
            started.write_text(found["file"])
            time.sleep(600)
        return _analyse_one(found, prefix, opts, threads)

    monkeypatch.setattr(lray, "_list_node", listing)
    monkeypatch.setattr(lray, "_analyse_one", hanging)

    def remove():
        _wait_for(started)
        cluster.remove_node(node)

    r = _run_while(lambda: lray.ranks(VERL, progress=False), remove)
    assert not r.shared_fs
    _check_one_lost(r, expected, victim, "ray: ")
    (run,) = [f for f in r.files if f.file == victim]
    assert run.node_id == doomed
    assert doomed not in alive_nodes()


def test_a_lost_nodes_files_run_again_where_they_are_seen(cluster, monkeypatch, tmp_path):
    """Shared file system: a third node is removed while analysing a file; the file runs
    again on a node still there, and the report is whole."""
    node, doomed = _third_node(cluster)
    started = tmp_path / "started"

    def hanging(found, prefix, opts, threads):
        import ray as ray_
        from leakscope.ray import _analyse_one
        if ray_.get_runtime_context().get_node_id() == doomed:
            started.write_text(found["file"])
            time.sleep(600)
        return _analyse_one(found, prefix, opts, threads)

    monkeypatch.setattr(lray, "_analyse_one", hanging)

    def remove():
        _wait_for(started)
        cluster.remove_node(node)

    r = _run_while(lambda: lray.ranks(VERL, progress=False), remove)
    assert r.to_dict() == leakscope.ranks(VERL).to_dict()
    moved = started.read_text()
    (run,) = [f for f in r.files if f.file == moved]
    assert run.error is None and run.node_id != doomed
    assert doomed not in alive_nodes()


def test_without_ray_the_import_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'leakscope\[ray\]'"):
        lray.ranks(VERL)


needs_export = pytest.mark.skipif(
    not hasattr(leakscope._native, "export_parquet"),
    reason="this build has no _native.export_parquet (the Parquet export)")


@needs_export
def test_export_on_a_shared_file_system_writes_the_directory_once(cluster, tmp_path):
    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed")
    out = tmp_path / "parquet"
    dirs = lray.export(VERL, out, progress=False)
    assert len(dirs) == 1 and Path(dirs[0]).parent == out
    assert Path(dirs[0]).name in alive_nodes()
    single = tmp_path / "single"
    summary = leakscope._native.export_parquet([str(VERL)], str(single))
    con = duckdb.connect()
    for t in summary["tables"]:
        name = t["table"]
        a, b = f"{dirs[0]}/{name}.parquet", f"{single}/{name}.parquet"
        (diff,) = con.execute(f"""select count(*) from (
            (select * from '{a}' except all select * from '{b}') union all
            (select * from '{b}' except all select * from '{a}'))""").fetchone()
        assert diff == 0, name
        (n,) = con.execute(f"select count(*) from '{a}'").fetchone()
        assert n == t["rows"]


def _split_listing(monkeypatch, holds):
    """Node-local disks on one machine: each node lists only the files ``holds(node
    index, file)`` says it has."""
    order = alive_nodes()

    def listing(root_abs, prefix):
        import ray as ray_
        from leakscope.ray import _list_node
        i = order.index(ray_.get_runtime_context().get_node_id())
        out = _list_node(root_abs, prefix)
        out["files"] = [f for f in out["files"] if holds(i, f["file"])]
        out["skipped_files"] = []
        return out

    monkeypatch.setattr(lray, "_list_node", listing)
    return order


def _recorded_exports(monkeypatch, log):
    def recording(paths, prefix, out_dir):
        with open(log, "a") as f:
            f.write(json.dumps([os.path.basename(out_dir), paths]) + "\n")
        return "{}", 0.0  # the files are not really node-local here: nothing to write

    monkeypatch.setattr(lray, "_export_node", recording)


@needs_export
def test_export_on_node_local_disks(cluster, monkeypatch, tmp_path):
    """Each node exports the directory it holds (so the tables have ranks and steps);
    where nodes share some files, each file still goes to one node only."""
    files = [f["file"] for f in leakscope._native.list_here(str(VERL), "")["files"]]
    log = tmp_path / "exports.log"
    _recorded_exports(monkeypatch, log)

    order = _split_listing(monkeypatch, lambda i, f: ("/step2/" in f) == (i == 1))
    dirs = lray.export(VERL, tmp_path / "out", progress=False)
    assert dirs == sorted(str(tmp_path / "out" / n) for n in order)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(calls) == sorted([n, [str(VERL)]] for n in order)

    log.unlink()
    _split_listing(monkeypatch, lambda i, f: i == 0 or "/step2/" in f)  # step2 on both
    lray.export(VERL, tmp_path / "out2", progress=False)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    exported = []
    for node, paths in calls:
        held = files if order.index(node) == 0 else [f for f in files if "/step2/" in f]
        exported += held if paths == [str(VERL)] else paths
        assert set(paths) <= set(held) or paths == [str(VERL)]
    assert sorted(exported) == sorted(files), "a file exported twice, or not at all"
