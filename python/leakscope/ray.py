"""``leakscope ranks`` over a Ray cluster, where each node keeps its own snapshots.

verl and similar trainers write one snapshot per rank and step on the node that ran the
rank (``save_path/step{N}/torch_memory_rank{R}_pid{P}.pickle``), often on a disk only
that node sees. :func:`ranks` lists the directory on every alive node, analyses each file
in a task pinned to a node that holds it, and merges the rows on the driver: what crosses
the network is file lists and each file's rows and top suspects (kilobytes), never a
snapshot. The merged report is the one ``leakscope ranks DIR --json`` prints for the same
files on one machine. :func:`export` writes each node's files as Parquet tables.

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
from ._results import Result

PathLike = Union[str, "os.PathLike[str]"]

_INSTALL = "leakscope.ray needs Ray: pip install 'leakscope[ray]'"

# A found entry naming no file: analysed on the driver only to check the options.
_NO_FILE = json.dumps({"file": "", "rank": None, "step": "", "step_order": 0})


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError(_INSTALL) from e
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
    cluster produced it.

    Attributes: ``files`` (a :class:`FileRun` per file: node, seconds, bytes returned to
    the driver, error), ``suspects`` (file -> ``[[device, [suspect, ...]], ...]``, each
    device's largest suspects as the ``leaks`` report writes them), ``nodes`` (the node ids
    used), ``shared_fs`` (whether every node saw the same files), ``wall_s``.
    """

    def __init__(self, data: dict, text: str, files: List[FileRun], suspects: Dict[str, list],
                 nodes: List[str], shared_fs: bool, wall_s: float) -> None:
        super().__init__("ranks", data, text)
        self.files = files
        self.suspects = suspects
        self.nodes = nodes
        self.shared_fs = shared_fs
        self.wall_s = wall_s

    def __repr__(self) -> str:
        errors = sum(1 for f in self.files if f.error and f.error.startswith("ray: "))
        return (f"<leakscope ranks result over Ray: {len(self.files)} files on "
                f"{len(self.nodes)} node(s) in {self.wall_s:.1f} s, {len(self.rows())} rows"
                f"{f', {errors} lost to Ray' if errors else ''}>")


# --- tasks (run on the nodes; plain functions, wrapped with ray.remote when used) -------


def _list_node(root_abs: str, prefix: str) -> Optional[dict]:
    """The snapshots below ``root_abs`` as this node sees them, named without ``prefix``
    (``None``: no such directory here)."""
    listing = _native.list_here(root_abs, prefix)
    return None if listing is None else json.loads(listing)


def _analyse_one(found: dict, prefix: str, opts: Dict[str, Any], threads: bool) -> tuple:
    """One file's rows and top suspects, the file named as found, and the seconds it
    took."""
    t = time.perf_counter()
    text = _native.analyse_found(json.dumps(found), prefix, opts, threads)
    return text, time.perf_counter() - t


def _export_node(paths: List[str], prefix: str, out_dir: str) -> tuple:
    """Exports ``paths`` (the run's directory, or this node's files) as Parquet into
    ``out_dir``; returns the export's JSON summary and the seconds it took."""
    t = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    summary = _native.export_parquet([os.path.join(prefix, p) for p in paths], out_dir)
    return summary, time.perf_counter() - t


# --- the driver ----------------------------------------------------------------------


class _Job:
    """A unit of work pinned to a node that holds its input: a file of the run (``args``
    its found entry), or a node's share of an export."""

    __slots__ = ("name", "holders", "size", "args", "tries")

    def __init__(self, name: str, holders: List[str], size: int, args: Any) -> None:
        self.name, self.holders, self.size, self.args, self.tries = name, holders, size, args, 0


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
        listing = _native.list_here(root_abs, prefix)
        if listing is None:
            raise ValueError(f"{root} is not a directory")
        found = json.loads(listing)
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

    merged = json.loads(_native.merge_listings(json.dumps(list(listed.items())), len(seen),
                                                shared_fs is None))
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


def _limits(nodes: Dict[str, float], max_per_node: Optional[int]) -> Dict[str, int]:
    if max_per_node is not None and max_per_node < 1:
        raise ValueError(f"max_per_node must be at least 1, not {max_per_node}")
    return {n: max_per_node or max(1, int(cpus)) for n, cpus in nodes.items()}


def _run_jobs(ray: Any, nodes: Dict[str, float], jobs: List[_Job], limits: Dict[str, int],
              submit: Callable[[_Job, str], Any], report: Optional[Callable]) -> Dict[_Job, tuple]:
    """Runs every job on a node that holds it, at most ``limits[node]`` at once per node,
    largest first (the last to finish is small); ``submit(job, node)`` starts one and its
    task returns ``(value, seconds)``. A job whose node left runs again on another holder
    (three tries); one that failed otherwise, or that no alive node holds, keeps its error
    (``ray: <exception type>: <message>``). Returns job -> ``(value, node, seconds, error)``.
    """
    pending = sorted(jobs, key=lambda j: -j.size)
    alive = set(nodes)
    busy = {n: 0 for n in nodes}
    inflight: Dict[Any, tuple] = {}
    out: Dict[_Job, tuple] = {}
    node_errors: Dict[str, str] = {}

    def finish(j: _Job, node: Optional[str], value: Any, seconds: float,
               error: Optional[str]) -> None:
        out[j] = (value, node, seconds, error)
        if report is not None:
            report(Progress(len(out), len(jobs), j.name, node or "", seconds, error))

    def failed(j: _Job, node: str, error: str) -> None:
        if node not in alive and alive.intersection(j.holders) and j.tries < 3:
            pending.append(j)  # its node left, another one sees the input: run it there
        else:
            finish(j, node, None, 0.0, error)

    while pending or inflight:
        for node in nodes:
            while node in alive and busy[node] < limits[node]:
                j = next((j for j in pending if node in j.holders), None)
                if j is None:
                    break
                pending.remove(j)
                j.tries += 1
                inflight[submit(j, node)] = (j, node)
                busy[node] += 1
        for j in [j for j in pending if not alive.intersection(j.holders)]:
            pending.remove(j)
            node = j.holders[0]
            finish(j, node, None, 0.0, node_errors.get(node, _left(node)))
        if not inflight:
            continue
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=_POLL_S)
        if not ready:
            # Nothing finished for a while: tasks of a node that left without their
            # failing are given up here.
            now = _alive_nodes(ray)
            for ref, (j, node) in list(inflight.items()):
                if node not in now:
                    ray.cancel(ref, force=True)
                    del inflight[ref]
                    busy[node] -= 1
                    alive.discard(node)
                    failed(j, node, node_errors.setdefault(node, _left(node)))
            continue
        for ref in ready:
            j, node = inflight.pop(ref)
            busy[node] -= 1
            try:
                value, seconds = ray.get(ref)
            except Exception as e:  # the task died, or its node did
                error = _error_text(e)
                if node in alive and _node_gone(ray, node, e):
                    alive.discard(node)
                    node_errors[node] = error
                failed(j, node, error)
                continue
            finish(j, node, value, seconds, None)
    return out


def ranks(root: PathLike, *, windows: Optional[str] = "auto",
          shared_fs: Optional[bool] = None, max_per_node: Optional[int] = None,
          progress: Union[None, bool, Callable[[Progress], Any]] = None,
          num_cpus: float = 1) -> ClusterRanks:
    """``leakscope ranks ROOT`` over the Ray cluster this process is connected to (it
    calls ``ray.init()`` when not yet connected). ``to_dict()`` of the result is what the
    command line prints with ``--json`` for the same files on one machine.

    - ``root``: the run's directory, the same path on every node (a relative one is taken
      from this process's working directory, and the rows name files as the command line
      run from here would).
    - ``shared_fs``: ``None`` lists ``root`` on every alive node and analyses each distinct
      file (path, size, modification time) once, on a node that holds it; when every node
      lists the same files, the work spreads over all of them. ``True``: list once here
      and spread the work; ``False``: every node analyses everything it lists.
    - ``max_per_node``: files analysed at once on a node (default: its CPUs). Each
      analysis holds about half the file's size in memory.
    - ``progress``: a callable given a :class:`Progress` per finished file, ``True`` to
      print a line per file on stderr, ``False`` for silence; default: print when stderr
      is a terminal.
    - ``num_cpus``: the CPUs each task reserves (``0`` runs beside actors that hold every
      CPU, bounded by ``max_per_node`` only).

    A file whose task failed (the worker died, the node was lost) keeps its row, with
    ``error`` set to ``ray: <exception type>: <message>``; a file in flight on a lost node
    runs again on another node that sees it, when there is one.

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

    nodes = _alive_nodes(ray)
    files, skipped, shared = _listings(ray, nodes, root, shared_fs)
    _, prefix = _roots(root)
    limits = _limits(nodes, max_per_node)
    analyse = ray.remote(_analyse_one)

    def submit(f: _Job, node: str) -> Any:
        pin = _pinned(ray, node, max_retries=0, num_cpus=min(num_cpus, nodes[node]))
        return analyse.options(**pin).remote(f.args, prefix, opts, limits[node] < nodes[node])

    out = _run_jobs(ray, nodes, files, limits, submit, _reporter(progress))
    done = {f: json.loads(out[f][0]) if out[f][3] is None else None for f in files}
    analysed = [{"found": f.args, "rows": done[f] and done[f]["rows"], "error": out[f][3]}
                for f in files]
    merged, text = _native.merge_found(root, json.dumps(analysed), skipped)
    runs = [FileRun(f.name, out[f][1], out[f][2],
                    0 if out[f][0] is None else len(out[f][0].encode()), out[f][3])
            for f in files]
    suspects = {f.name: done[f]["suspects"] for f in files if done[f] and done[f]["suspects"]}
    return ClusterRanks(json.loads(merged), text, runs, suspects, list(nodes), shared,
                        time.perf_counter() - started)


def export(root: PathLike, out_dir: PathLike, *, shared_fs: Optional[bool] = None,
           progress: Union[None, bool, Callable[[Progress], Any]] = None,
           num_cpus: float = 1) -> List[str]:
    """Writes the run's Parquet tables (``files``, ``ranks``, ``suspects``, ``top_sites``,
    ``events``, ``stacks``; docs/schemas.md) on the nodes that hold its files, each file
    once: one task per node exports into ``out_dir/<node_id>/`` (``out_dir`` as that node
    sees it: a shared folder, or a local one to collect afterwards).

    Files are listed as :func:`ranks` lists them (``shared_fs`` likewise). A node exports
    ``root`` itself when it is to export everything it sees there (node-local disks), so
    the tables carry the rank and step of each file and skip what is not a snapshot; with
    a shared file system one node exports the whole directory (the export uses every core
    of that node). Only when nodes share some files and not others does a node export its
    files by name (``rank`` and ``step`` null then). The ``outlier`` column of each node's
    ``ranks`` table compares that node's files; :func:`ranks` compares the whole run.

    Returns the folders written; raises ``RuntimeError`` naming each node whose export
    failed, after the others finished.

    Example::

        dirs = leakscope.ray.export("/local/verl/memory_snapshots", "/shared/leakscope")
        duckdb.sql("select * from '/shared/leakscope/*/ranks.parquet' where outlier")
    """
    ray = _ray()
    if not hasattr(_native, "export_parquet"):
        raise NotImplementedError("this build of leakscope has no Parquet export "
                                  "(_native.export_parquet)")
    if not ray.is_initialized():
        ray.init()
    root, out_dir = os.fspath(root), os.fspath(out_dir)
    nodes = _alive_nodes(ray)
    files, _skipped, shared = _listings(ray, nodes, root, shared_fs)
    _, prefix = _roots(root)
    out_abs = os.path.abspath(out_dir)

    share: Dict[str, List[_Job]] = {n: [] for n in nodes}
    if shared:
        here = ray.get_runtime_context().get_node_id()
        share[here if here in nodes else next(iter(nodes))] = list(files)
    else:
        # Each file to the holder with the fewest bytes so far, largest files first.
        load = {n: 0 for n in nodes}
        for f in sorted(files, key=lambda f: -f.size):
            node = min((h for h in f.holders if h in load), key=lambda h: load[h])
            load[node] += f.size
            share[node].append(f)

    jobs = []
    for node, mine in share.items():
        if mine:
            whole = len(mine) == sum(1 for f in files if node in f.holders)
            jobs.append(_Job(os.path.join(out_dir, node), [node], sum(f.size for f in mine),
                             [root] if whole else [f.name for f in mine]))
    task = ray.remote(_export_node)

    def submit(job: _Job, node: str) -> Any:
        pin = _pinned(ray, node, max_retries=0, num_cpus=min(num_cpus, nodes[node]))
        return task.options(**pin).remote(job.args, prefix, os.path.join(out_abs, node))

    out = _run_jobs(ray, nodes, jobs, {n: 1 for n in nodes}, submit, _reporter(progress))
    written = sorted(j.name for j in jobs if out[j][3] is None)
    failed = [f"node {j.holders[0]}: {out[j][3]}" for j in jobs if out[j][3] is not None]
    if failed:
        err = RuntimeError("leakscope.ray.export: " + "; ".join(failed)
                           + f" (written: {', '.join(written) or 'none'})")
        err.written = written  # type: ignore[attr-defined]
        raise err
    return written


__all__ = ["ClusterRanks", "FileRun", "Progress", "export", "ranks"]

