"""Snapshots and the functions over several of them."""

from __future__ import annotations

import os
from typing import Any, Iterable, Optional, Sequence, Union

from . import _native
from ._command import command
from ._native import CheckResult, Result

PathLike = Union[str, "os.PathLike[str]"]


class Snapshot:
    """A loaded memory snapshot (every device it holds); each method is a command of the
    command line and returns its result (``str()``, ``to_dict()``, ``to_pandas()``).

    Example::

        import leakscope
        snap = leakscope.load("run.pickle")
        snap                                      # a compact summary
        snap.leaks().to_pandas()                  # what grows per micro-batch
        snap.top(at="peak", limit=10)             # what holds memory at the peak
    """

    def __init__(self, native: "_native.NativeSession") -> None:
        self._native = native
        self._summary: Optional[Result] = None

    @property
    def name(self) -> str:
        """The file (or the name given to bytes and objects)."""
        return self._native.name

    @property
    def warnings(self) -> list:
        """What the loader kept without interpreting, or found inconsistent."""
        return self._native.warnings()

    def summary(self) -> Result:
        """Format, devices, segments, blocks, bytes and trace events
        (``leakscope summary --json``).

        Example: ``snap.summary().to_dict()["totals"]["reserved_bytes"]``
        """
        if self._summary is None:
            self._summary = self._native.run("summary", {})
        return self._summary

    # Each command's help starts with its description on the command line (``@command``).

    @command("leaks")
    def leaks(self, **options: Any) -> Result:
        """Example: ``snap.leaks(windows="annotation:micro_batch").to_pandas()``"""
        return self._native.run("leaks", options)

    @command("windows")
    def windows(self, **options: Any) -> Result:
        """Example: ``snap.windows().to_dict()["devices"][0]["reason"]``"""
        return self._native.run("windows", options)

    @command("phases")
    def phases(self, **options: Any) -> Result:
        """Example: ``snap.phases().to_pandas().sort_values("peak_bytes").tail()``"""
        return self._native.run("phases", options)

    @command("top")
    def top(self, **options: Any) -> Result:
        """Example: ``snap.top(at="peak", limit=5).to_pandas()``"""
        return self._native.run("top", options)

    @command("tree")
    def tree(self, **options: Any) -> Result:
        """The data holds every node; ``str()`` sums up those under ``min_share``.

        Example: ``snap.tree(at="peak").to_dict()["devices"][0]["root"]["bytes"]``
        """
        return self._native.run("tree", options)

    @command("segments")
    def segments(self, **options: Any) -> Result:
        """Example: ``snap.segments(at="oom").to_pandas()``"""
        return self._native.run("segments", options)

    @command("timeline")
    def timeline(self, **options: Any) -> Result:
        """Example: ``snap.timeline(max_allocations=500).to_pandas()``"""
        return self._native.run("timeline", options)

    @command("oom")
    def oom(self, **options: Any) -> Result:
        """Example: ``snap.oom().to_dict()["devices"][0]["advice"]``"""
        return self._native.run("oom", options)

    @command("flamegraph")
    def flamegraph(self, path: Optional[PathLike] = None, **options: Any) -> str:
        """Returns the SVG (or the folded stacks) as text, also written to ``path`` when
        given.

        Example: ``snap.flamegraph("peak.svg", at="peak")``
        """
        return self._native.flamegraph(options, path)

    @command("report")
    def report(self, path: Optional[PathLike] = None, **options: Any) -> Result:
        """Writes the page to ``path`` when given; returns its data.

        Example: ``snap.report("report.html")``
        """
        return self._native.report_page(options, path)

    def __repr__(self) -> str:
        return f"<leakscope.Snapshot {self._native.describe()}>"

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()


def load(path_or_bytes: Union[PathLike, bytes, bytearray, memoryview], *,
         max_decompressed_bytes: Optional[int] = None, name: Optional[str] = None) -> Snapshot:
    """Loads a snapshot from a path (pickle, JSON or leakscope cache; plain, ``.gz`` or
    ``.zst``) or the file's bytes; ``SnapshotError`` says what is wrong and where.

    Example::

        snap = leakscope.load("oom_snapshot.pickle.gz")
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = path_or_bytes if isinstance(path_or_bytes, bytes) else bytes(path_or_bytes)
        return Snapshot(_native.load_bytes(data, name or "<bytes>", max_decompressed_bytes))
    return Snapshot(_native.load_path(os.fspath(path_or_bytes), max_decompressed_bytes))


def load_series(paths: Union[PathLike, Sequence[PathLike]], *, rank: Optional[int] = None,
                max_decompressed_bytes: Optional[int] = None) -> Snapshot:
    """Loads a series of snapshots, one per step (state-only ones will do), as
    ``leakscope leaks FILE FILE...`` reads them: a list of files (in the order of the
    numbers in their names) or a run directory (the files of ``rank``, or of its only
    rank). The changes between consecutive files are the windows.

    Example::

        # in the training loop: torch.cuda.memory._record_memory_history(enabled="state")
        # and torch.cuda.memory._dump_snapshot(f"step{step:04d}.pickle") after each step
        series = leakscope.load_series(sorted(glob.glob("step*.pickle")))
        series.leaks().to_pandas()
    """
    if isinstance(paths, (str, os.PathLike)):
        files = _native.series_files(os.fspath(paths), rank)
    else:
        files = [os.fspath(p) for p in paths]
    return Snapshot(_native.load_series(files, max_decompressed_bytes))


def from_snapshot(obj: Any, name: str = "<object>") -> Snapshot:
    """A snapshot from what ``torch.cuda.memory._snapshot()`` (or ``memory_snapshot()``)
    returns, read in place: no pickle, no file.

    Example::

        torch.cuda.memory._record_memory_history()
        train_steps(3)
        snap = leakscope.from_snapshot(torch.cuda.memory._snapshot())
    """
    return Snapshot(_native.from_object(obj, name))


def _snapshot(source: Any) -> Snapshot:
    """A :class:`Snapshot` from one, a path, the file's bytes or
    ``torch.cuda.memory._snapshot()``'s dict."""
    if isinstance(source, Snapshot):
        return source
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        return load(source)
    if isinstance(source, (dict, list)):
        return from_snapshot(source)
    raise TypeError("expected a leakscope.Snapshot, a path, the file's bytes or the dict of "
                    f"torch.cuda.memory._snapshot(), not {type(source).__name__}")


@command("compare")
def compare(a: Union[Snapshot, PathLike], b: Union[Snapshot, PathLike],
            **options: Any) -> Result:
    """``a`` and ``b``: snapshots or files, or two run directories (with ``at``: step by
    step, rank by rank).

    Example: ``leakscope.compare("before.pickle", "after.pickle", at="peak").to_pandas()``
    """
    def side(x: Any) -> Any:
        return os.fspath(x) if isinstance(x, (str, os.PathLike)) else _snapshot(x)._native

    return _native.compare(side(a), side(b), options)


@command("ranks")
def ranks(directory: PathLike, **options: Any) -> Result:
    """A folder without a run layout gives a row per file.

    Example: ``leakscope.ranks("memory_snapshots/").to_pandas().query("outlier")``
    """
    return _native.ranks(os.fspath(directory), options)


def check(paths: Union[PathLike, Snapshot, Sequence[Union[PathLike, Snapshot]]],
          budget: Union[PathLike, str, dict], baseline: Optional[Union[PathLike, dict]] = None,
          windows: Optional[str] = None, roles: Optional[PathLike] = None) -> CheckResult:
    """The CI memory gate (``leakscope check --json``): ``budget`` a TOML file, its text
    or its tables as a dict; ``baseline`` an earlier ``check`` or ``leaks`` JSON file or
    its dict; ``roles`` as ``--roles``. ``passed`` says whether every limit held.

    Example::

        r = leakscope.check(["run.pickle"], "leakscope.toml")
        assert r.passed, r.failures()
    """
    items: Iterable = [paths] if isinstance(paths, (str, os.PathLike, Snapshot)) else paths
    return _native.check([_snapshot(p)._native for p in items], budget, baseline, windows,
                         roles)
