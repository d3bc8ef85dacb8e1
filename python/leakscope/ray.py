"""``leakscope ranks`` and ``leakscope export`` over a Ray cluster whose nodes keep
their own snapshots (verl's ``save_path/step{N}/torch_memory_rank{R}_pid{P}.pickle`` on a
node-local disk). Each file is analysed in a task pinned to a node that holds it; only
file lists and each file's rows (kilobytes) cross the network, and the merged report is
the one ``leakscope ranks DIR --json`` prints for the same files on one machine. How it
works, what it costs and how to run it beside training: docs/scale-out.md.

Needs Ray (``pip install 'leakscope[ray]'``) and leakscope installed on every node.

Example::

    import ray, leakscope.ray
    ray.init(address="auto")
    r = leakscope.ray.ranks("/local/verl/memory_snapshots")
    r.to_pandas().query("outlier")          # the rank that grows unlike its peers
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Union

from . import _native
from ._native import Result

PathLike = Union[str, "os.PathLike[str]"]

# A found entry naming no file: analysed on the driver only to check the options.
_NO_FILE = {"file": "", "rank": None, "step": "", "step_order": 0}


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError("leakscope.ray needs Ray: pip install 'leakscope[ray]'") from e
    return ray


class Progress(NamedTuple):
    """One finished file (or node, for :func:`export`), given to a ``progress`` callback."""

    done: int
    total: int
    file: str
    node_id: str
    seconds: float
    error: Optional[str]


class FileRun(NamedTuple):
    """Where and how one file was analysed."""

    file: str
    node_id: Optional[str]
    seconds: float
    bytes_returned: int
    error: Optional[str]


class ClusterRanks(Result):
    """The run's report (``to_dict()`` is ``leakscope ranks DIR --json``) and how the
    cluster made it: ``files`` (a :class:`FileRun` per file), ``suspects`` (file -> each
    device's largest suspects, as ``leaks`` writes them), ``nodes``, ``shared_fs`` (every
    node saw the same files) and ``wall_s``.
    """

    def __new__(cls, data: str, text: str, files: List[FileRun], suspects: Dict[str, list],
                nodes: List[str], shared_fs: bool, wall_s: float) -> "ClusterRanks":
        self = super().__new__(cls, "ranks", data, text)
        self.files, self.suspects, self.nodes = files, suspects, nodes
        self.shared_fs, self.wall_s = shared_fs, wall_s
        return self

    def __reduce__(self) -> tuple:
        return (ClusterRanks, (self.to_json(None), str(self), self.files, self.suspects,
                               self.nodes, self.shared_fs, self.wall_s))

    def __repr__(self) -> str:
        errors = sum(1 for f in self.files if f.error and f.error.startswith("ray: "))
        return (f"<leakscope ranks result over Ray: {len(self.files)} files on "
                f"{len(self.nodes)} node(s) in {self.wall_s:.1f} s, {len(self.rows())} rows"
                f"{f', {errors} lost to Ray' if errors else ''}>")


# --- tasks (run on the nodes; plain functions, wrapped with ray.remote when used) -------


def _list_node(root_abs: str, prefix: str) -> Optional[dict]:
    """The snapshots below ``root_abs`` as this node sees them, named without ``prefix``
    (``None``: no such directory here)."""
    return _native.list_here(root_abs, prefix)


def _analyse_one(found: dict, prefix: str, opts: Dict[str, Any], threads: bool) -> tuple:
    """One file's rows and top suspects, the file named as found, and the seconds it
    took."""
    t = time.perf_counter()
    text = _native.analyse_found(found, prefix, opts, threads)
    return text, time.perf_counter() - t


def _export_node(paths: List[str], prefix: str, out_dir: str) -> tuple:
    """Exports ``paths`` (the run's directory, or this node's files) as Parquet into
    ``out_dir``; returns what the export wrote and the seconds it took."""
    t = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    summary = _native.export_parquet([os.path.join(prefix, p) for p in paths], out_dir)
    return summary, time.perf_counter() - t


# --- the driver ----------------------------------------------------------------------


class _Job(NamedTuple):
    """A unit of work pinned to a node that holds its input: a file of the run (``args``
    its found entry), or a node's share of an export."""

    name: str
    holders: List[str]
    size: int
    args: Any


def _alive_nodes(ray: Any) -> Dict[str, float]:
    """Alive node id -> its CPUs, in the order Ray lists them."""
    return {n["NodeID"]: float(n.get("Resources", {}).get("CPU", 0))
            for n in ray.nodes() if n.get("Alive")}


def _pinned(ray: Any, node: str, **kw: Any) -> Dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False), **kw}


_POLL_S = 10.0


def _left(node: str) -> str:
    return f"ray: NodeDiedError: node {node} left the cluster"


def _node_gone(ray: Any, node: str, e: BaseException) -> bool:
    """Whether a failed task's node left the cluster (the exception may arrive before the
    cluster marks the node dead: a system error waits a few seconds for it)."""
    if isinstance(e, ray.exceptions.RayTaskError):
        return False  # the task's own exception: its node ran it
    if isinstance(e, ray.exceptions.NodeDiedError):
        return True
    deadline = time.monotonic() + 3
    while True:
        if node not in _alive_nodes(ray):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def _error_text(e: BaseException) -> str:
    """``ray: <exception type>: <message>`` (the task's own exception when it raised one;
    the message's first line)."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        e = cause
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"ray: {type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _roots(root: str) -> tuple:
    """(the root as the nodes open it, the prefix stripped from what they find)."""
    if os.path.isabs(root):
        return root, ""
    full = os.path.join(os.getcwd(), root)
    return full, full[: len(full) - len(root)]


def _listings(ray: Any, nodes: Dict[str, float], root: str,
              shared_fs: Optional[bool]) -> tuple:
    """Lists the run: ``(files, skipped, shared)``, ``files`` a :class:`_Job` per
    distinct file, with the nodes that hold it."""
    root_abs, prefix = _roots(root)
    if shared_fs:
        found = _native.list_here(root_abs, prefix)
        if found is None:
            raise ValueError(f"{root} is not a directory")
        return ([_Job(f["file"], list(nodes), f["size"] or 0, f)
                 for f in found["files"]], found["skipped"], True)

    lister = ray.remote(_list_node)
    refs = {lister.options(**_pinned(ray, n, num_cpus=0, max_retries=0)).remote(root_abs, prefix): n
            for n in nodes}
    seen: Dict[str, Optional[dict]] = {}
    for ref, node in refs.items():
        try:
            seen[node] = ray.get(ref)
        except Exception as e:  # a node lost while listing: its files are unknown
            warnings.warn(f"leakscope.ray: node {node} could not list {root}: {_error_text(e)}",
                          RuntimeWarning, stacklevel=3)
    listed = {n: v for n, v in seen.items() if v is not None}
    if not listed:
        raise ValueError(f"{root} is not a directory" + (
            "" if len(seen) < 2 else " on any node"))

    merged = _native.merge_listings(list(listed.items()), len(seen), shared_fs is None)
    files = [_Job(f["file"], f["holders"], f["size"], f) for f in merged["files"]]
    return files, merged["skipped"], merged["shared"]


def _reporter(progress: Union[None, bool, Callable[[Progress], Any]]) -> Optional[Callable]:
    if callable(progress):
        return progress
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None

    def show(p: Progress) -> None:
        what = f"error: {p.error}" if p.error else f"{p.seconds:.1f} s"
        print(f"leakscope.ray: {p.done}/{p.total} {p.file} on node {p.node_id[:8]} ({what})",
              file=sys.stderr, flush=True)
    return show


def _run_jobs(ray: Any, jobs: List[_Job], limits: Dict[str, int],
              submit: Callable[[_Job, str], Any], report: Optional[Callable]) -> List[tuple]:
    """Runs the jobs where and when ``_native.Dispatch`` says (its rules: nodes that hold
    the input, ``limits[node]`` at once, largest first, reruns after a node left);
    ``submit(job, node)`` starts one, and its task returns ``(value, seconds)``. Returns
    per job ``(value, node, seconds, error)``, the error ``ray: <exception type>:
    <message>``."""
    plan = _native.Dispatch([(j.holders, j.size) for j in jobs], list(limits.items()))
    out: List[Optional[tuple]] = [None] * len(jobs)
    inflight: Dict[Any, tuple] = {}

    def finish(i: int, node: str, value: Any, seconds: float, error: Optional[str]) -> None:
        out[i] = (value, node, seconds, error)
        if report is not None:
            done = sum(o is not None for o in out)
            report(Progress(done, len(jobs), jobs[i].name, node, seconds, error))

    while not plan.done():
        for i, node in plan.start():
            inflight[submit(jobs[i], node)] = (i, node)
        for i, node, error in plan.take_ended():
            finish(i, node, None, 0.0, error)
        if not inflight:
            continue
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=_POLL_S)
        if not ready:
            # Nothing finished for a while: tasks of a node that left without their
            # failing are given up here.
            now = _alive_nodes(ray)
            for ref, (i, node) in list(inflight.items()):
                if node not in now:
                    ray.cancel(ref, force=True)
                    del inflight[ref]
                    plan.lost(i, _left(node))
        for ref in ready:
            i, node = inflight.pop(ref)
            try:
                value, seconds = ray.get(ref)
            except Exception as e:  # the task died, or its node did
                plan.failed(i, _error_text(e), plan.alive(node) and _node_gone(ray, node, e))
                continue
            plan.succeeded(i)
            finish(i, node, value, seconds, None)
    for i, node, error in plan.take_ended():
        finish(i, node, None, 0.0, error)
    return out  # type: ignore[return-value]


def ranks(root: PathLike, *, windows: Optional[str] = "auto",
          shared_fs: Optional[bool] = None, max_per_node: Optional[int] = None,
          progress: Union[None, bool, Callable[[Progress], Any]] = None,
          num_cpus: float = 1) -> ClusterRanks:
    """``leakscope ranks ROOT`` over the Ray cluster this process is connected to (or
    starts); ``to_dict()`` is what ``leakscope ranks ROOT --json`` prints for the same
    files on one machine. Arguments, and what becomes of a lost node's files:
    docs/scale-out.md.

    - ``root``: the run's directory, the same path on every node (a relative one is taken
      from this process's working directory);
    - ``shared_fs``: ``None`` analyses each distinct file once on a node that lists it,
      ``True`` lists once here, ``False`` has every node analyse all it lists;
    - ``max_per_node``: files analysed at once on a node (default: its CPUs);
    - ``progress``: a callable given a :class:`Progress` per file, or ``True``/``False``
      for a line per file on stderr (default: when stderr is a terminal);
    - ``num_cpus``: the CPUs each task reserves (``0`` runs beside training's actors).

    Example::

        r = leakscope.ray.ranks("/local/verl/memory_snapshots", max_per_node=2)
        r.to_pandas().query("outlier")[["rank", "step", "top_suspect"]]
    """
    ray = _ray()
    if not ray.is_initialized():
        ray.init()
    started = time.perf_counter()
    root = os.fspath(root)
    opts = {} if windows is None else {"windows": windows}
    _native.analyse_found(_NO_FILE, "", opts)  # a bad option raises here, not in every task
    if max_per_node is not None and max_per_node < 1:
        raise ValueError(f"max_per_node must be at least 1, not {max_per_node}")

    nodes = _alive_nodes(ray)
    files, skipped, shared = _listings(ray, nodes, root, shared_fs)
    _, prefix = _roots(root)
    limits = {n: max_per_node or max(1, int(cpus)) for n, cpus in nodes.items()}
    analyse = ray.remote(_analyse_one)

    def submit(f: _Job, node: str) -> Any:
        pin = _pinned(ray, node, max_retries=0, num_cpus=min(num_cpus, nodes[node]))
        return analyse.options(**pin).remote(f.args, prefix, opts, limits[node] < nodes[node])

    out = _run_jobs(ray, files, limits, submit, _reporter(progress))
    done = [None if error else json.loads(value) for value, _, _, error in out]
    analysed = [{"found": f.args, "rows": d and d["rows"], "error": o[3]}
                for f, d, o in zip(files, done, out)]
    merged, text = _native.merge_found(root, analysed, skipped)
    runs = [FileRun(f.name, node, seconds, len(value.encode()) if value else 0, error)
            for f, (value, node, seconds, error) in zip(files, out)]
    suspects = {f.name: d["suspects"] for f, d in zip(files, done) if d and d["suspects"]}
    return ClusterRanks(merged, text, runs, suspects, list(nodes), shared,
                        time.perf_counter() - started)


def export(root: PathLike, out_dir: PathLike, *, shared_fs: Optional[bool] = None,
           progress: Union[None, bool, Callable[[Progress], Any]] = None,
           num_cpus: float = 1) -> List[str]:
    """Writes the run's Parquet tables (docs/schemas.md) on the nodes that hold its
    files, each file once: a task per node writes ``out_dir/<node_id>/`` as that node sees
    it. A node that exports all it holds exports ``root`` itself, so its tables carry
    ranks and steps; which node takes which file: docs/scale-out.md. Files are listed as
    :func:`ranks` lists them (``shared_fs``, ``progress`` and ``num_cpus`` likewise).

    Returns the folders written; raises ``RuntimeError`` naming each node whose export
    failed, after the others finished.

    Example::

        dirs = leakscope.ray.export("/local/verl/memory_snapshots", "/shared/leakscope")
        duckdb.sql("select * from '/shared/leakscope/*/ranks.parquet' where outlier")
    """
    ray = _ray()
    if not ray.is_initialized():
        ray.init()
    root, out_dir = os.fspath(root), os.fspath(out_dir)
    nodes = _alive_nodes(ray)
    files, _skipped, shared = _listings(ray, nodes, root, shared_fs)
    _, prefix = _roots(root)
    out_abs = os.path.abspath(out_dir)
    here = ray.get_runtime_context().get_node_id()
    jobs = [_Job(os.path.join(out_dir, node), [node], size,
                 [root] if whole else [files[i].name for i in mine])
            for node, mine, whole, size in _native.export_shares(
                [(f.holders, f.size) for f in files], list(nodes), here, shared)]
    task = ray.remote(_export_node)

    def submit(job: _Job, node: str) -> Any:
        pin = _pinned(ray, node, max_retries=0, num_cpus=min(num_cpus, nodes[node]))
        return task.options(**pin).remote(job.args, prefix, os.path.join(out_abs, node))

    out = _run_jobs(ray, jobs, {n: 1 for n in nodes}, submit, _reporter(progress))
    written = sorted(j.name for j, o in zip(jobs, out) if o[3] is None)
    failed = [f"node {j.holders[0]}: {o[3]}" for j, o in zip(jobs, out) if o[3] is not None]
    if failed:
        err = RuntimeError("leakscope.ray.export: " + "; ".join(failed)
                           + f" (written: {', '.join(written) or 'none'})")
        err.written = written  # type: ignore[attr-defined]
        raise err
    return written


__all__ = ["ClusterRanks", "FileRun", "Progress", "export", "ranks"]

