"""Snapshots and the functions over several of them."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, Optional, Sequence, Union

from . import _native
from ._results import CheckResult, Result

PathLike = Union[str, "os.PathLike[str]"]
Device = Union[int, str, None]


def _opts(args: Dict[str, Any], *own: str) -> Dict[str, Any]:
    """A method's keyword arguments (its ``locals()``) as the binding's options, less
    ``self`` and the method's own arguments ``own``: every keyword the signature has
    reaches the library, which reads them as the command line's flags (unset ones left
    out; ``roles`` a path)."""
    out: Dict[str, Any] = {}
    for k, v in args.items():
        if k in own or k in ("self", "__class__") or v is None or v is False:
            continue
        out[k] = os.fspath(v) if k == "roles" else v
    return out


class Snapshot:
    """A loaded memory snapshot (every device it holds); its methods are the command
    line's commands, each returning a result with ``to_dict()`` (the ``--json`` output),
    ``to_pandas()`` and a notebook table.

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
        (``leakscope summary --json``, schema ``leakscope.summary/2``).

        Example::

            snap.summary().to_dict()["totals"]["reserved_bytes"]
        """
        if self._summary is None:
            self._summary = Result._from_json("summary", self._native.summary())
        return self._summary

    def leaks(self, windows: str = "auto", within: Optional[str] = None, by: str = "site",
              device: Device = None, warmup: int = 0, min_bytes: int = 0,
              user_code: Optional[str] = None, exclude: Optional[str] = None,
              focus: Optional[str] = None, python_only: bool = False,
              keep_internal: bool = False, roles: Optional[PathLike] = None) -> Result:
        """The call sites whose memory grows per window (micro-batch)
        (``leakscope leaks --json``, schema ``leakscope.leaks/8``).

        ``windows``: ``auto``, ``annotation[:REGEX]``, ``metadata``, ``frame:REGEX``,
        ``site:REGEX`` or ``every:N``; ``within``: ``annotation:REGEX``; ``by``: ``site``,
        ``user``, ``stack``, ``file``, ``function`` or ``role``; ``device``: an index
        (default: all); ``roles``: a TOML file with a ``[roles]`` table (``--roles``).
        Each suspect names its memory ``role`` (the ``role`` column of ``to_pandas()``).

        Example::

            for s in snap.leaks(windows="annotation:micro_batch").to_dict()["devices"][0]["suspects"]:
                print(s["site"]["label"], s["bytes_per_window"])
        """
        return Result._from_json("leaks", self._native.leaks(_opts(locals())))

    def windows(self, windows: str = "auto", within: Optional[str] = None,
                device: Device = None, exclude: Optional[str] = None,
                focus: Optional[str] = None, python_only: bool = False,
                keep_internal: bool = False, roles: Optional[PathLike] = None) -> Result:
        """How the trace is cut into windows, and why (``leakscope windows --json``).

        Example::

            snap.windows().to_dict()["devices"][0]["reason"]
        """
        return Result._from_json("windows", self._native.windows(_opts(locals())))

    def phases(self, device: Device = None) -> Result:
        """Memory per annotated phase (``leakscope phases --json``, schema
        ``leakscope.phases/1``): live bytes at the start, peak and end of each
        ``record_function`` range (``to_pandas()``: a row each), and per family of names.

        Example::

            snap.phases().to_pandas().sort_values("peak_bytes").tail()
        """
        return Result._from_json("phases", self._native.phases(_opts(locals())))

    def top(self, at: str = "end", by: str = "site", device: Device = None,
            limit: Optional[int] = None, user_code: Optional[str] = None,
            exclude: Optional[str] = None, focus: Optional[str] = None,
            python_only: bool = False, keep_internal: bool = False,
            roles: Optional[PathLike] = None) -> Result:
        """What holds memory at a point: ``end``, ``peak``, ``oom``, ``event:N`` or
        ``time:US`` (``leakscope top --json``; ``limit`` rows per device, default 20).
        Each row names the memory ``role`` of most of its bytes; ``by="role"`` groups by
        role; ``roles``: a TOML file with a ``[roles]`` table (``--roles``).

        Example::

            snap.top(at="peak", limit=5).to_pandas()
        """
        return Result._from_json("top", self._native.top(
            _opts(locals(), "at", "limit"), at, 20 if limit is None else limit))

    def tree(self, at: str = "end", device: Device = None, exclude: Optional[str] = None,
             focus: Optional[str] = None, python_only: bool = False,
             keep_internal: bool = False, by: str = "site",
             roles: Optional[PathLike] = None, min_share: Optional[float] = None) -> Result:
        """The call tree of the memory live at a point (``leakscope tree --json``);
        ``min_share``: the share under which ``str()`` sums nodes up in one line (the
        command's default when ``None``; the data holds every node);
        ``by="role"``: a node per memory role under the root (``roles``: a TOML file with a
        ``[roles]`` table, as ``--roles``).

        Example::

            snap.tree(at="peak").to_dict()["devices"][0]["root"]["bytes"]
        """
        return Result._from_json("tree", self._native.tree(
            _opts(locals(), "at", "min_share"), at, min_share))

    def segments(self, at: str = "end", device: Device = None) -> Result:
        """The segment map at a point (``leakscope segments --json``).

        Example::

            snap.segments(at="oom").to_pandas()
        """
        return Result._from_json("segments", self._native.segments(_opts(locals(), "at"), at))

    def timeline(self, max_allocations: int = 3000, device: Device = None,
                 exclude: Optional[str] = None, focus: Optional[str] = None,
                 python_only: bool = False, keep_internal: bool = False,
                 roles: Optional[PathLike] = None) -> Result:
        """Every allocation over the trace (``leakscope timeline --json``, schema
        ``leakscope.timeline/1``): the ``max_allocations`` largest by bytes x lifetime one
        by one (``to_pandas()``: a row each, with role and site), the rest summed in
        ``summarized``, exact after every event.

        Example::

            t = snap.timeline(max_allocations=500)
            t.to_pandas().sort_values("bytes").tail()
        """
        return Result._from_json("timeline", self._native.timeline(
            _opts(locals(), "max_allocations"), max_allocations))

    def oom(self, windows: str = "auto", within: Optional[str] = None, device: Device = None,
            by: str = "site", user_code: Optional[str] = None, exclude: Optional[str] = None,
            focus: Optional[str] = None, python_only: bool = False, keep_internal: bool = False,
            roles: Optional[PathLike] = None) -> Result:
        """Why an allocation failed (``leakscope oom --json``); each holder names its
        memory ``role`` (``roles``: a TOML file with a ``[roles]`` table, as ``--roles``).

        Example::

            snap.oom().to_dict()["devices"][0]["advice"]
        """
        return Result._from_json("oom", self._native.oom(_opts(locals())))

    def flamegraph(self, path: Optional[PathLike] = None, at: str = "end",
                   device: Device = None, folded: bool = False,
                   exclude: Optional[str] = None, focus: Optional[str] = None,
                   python_only: bool = False, keep_internal: bool = False,
                   roles: Optional[PathLike] = None) -> str:
        """A flame graph of the memory live at a point: the SVG (or folded stacks with
        ``folded=True``) as text, also written to ``path`` when given.

        Example::

            snap.flamegraph("peak.svg", at="peak")
        """
        text = self._native.flamegraph(_opts(locals(), "path", "at", "folded"), at, folded)
        if path is not None:
            _native.write_output(os.fspath(path), text.encode("utf-8"), [], self._native)
        return text

    def report(self, path: Optional[PathLike] = None, windows: str = "auto",
               within: Optional[str] = None, by: str = "site",
               device: Device = None, user_code: Optional[str] = None, exclude: Optional[str] = None,
               focus: Optional[str] = None, python_only: bool = False, keep_internal: bool = False,
               roles: Optional[PathLike] = None, max_allocations: int = 3000) -> Result:
        """The self-contained HTML report, written to ``path`` when given; returns its
        data (``leakscope report --json``, schema ``leakscope.report/7``).

        Example::

            snap.report("report.html")
        """
        data, text, page = self._native.report_page(
            _opts(locals(), "path", "max_allocations"),
            None if path is None else os.fspath(path), max_allocations)
        if path is not None and page is not None:
            _native.write_output(os.fspath(path), page.encode("utf-8"), [], self._native)
        return Result._from_json("report", (data, text))

    def __repr__(self) -> str:
        return f"<leakscope.Snapshot {self._native.describe()}>"

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()


def load(path_or_bytes: Union[PathLike, bytes, bytearray, memoryview], *,
         max_decompressed_bytes: Optional[int] = None, name: Optional[str] = None) -> Snapshot:
    """Loads a snapshot: a path (pickle, JSON or leakscope cache; plain, ``.gz`` or
    ``.zst``) or the file's bytes. Raises ``SnapshotError`` naming the file, the byte
    offset or trace entry, and what was expected.

    Example::

        snap = leakscope.load("oom_snapshot.pickle.gz")
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = path_or_bytes if isinstance(path_or_bytes, bytes) else bytes(path_or_bytes)
        return Snapshot(_native.load_bytes(data, name or "<bytes>", max_decompressed_bytes))
    return Snapshot(_native.load_path(os.fspath(path_or_bytes), max_decompressed_bytes))


def load_series(paths: Union[PathLike, Sequence[PathLike]], *, rank: Optional[int] = None,
                max_decompressed_bytes: Optional[int] = None) -> Snapshot:
    """Loads a series of snapshots, one per step (cheap state-only ones will do): a list of
    files, read in the order of the numbers in their names, or a run directory (its files
    of ``rank``, or of its only rank, in step order). The changes between consecutive
    files are the windows, so ``leaks()`` gives growth per snapshot with its onset file
    (``leakscope leaks FILE FILE...``). Raises ``SnapshotError`` naming a file that
    cannot be read, ``ValueError`` for fewer than two files or a directory of several
    ranks without ``rank``.

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
    """A snapshot from what ``torch.cuda.memory._snapshot()`` returns (a dict, or the list
    of segments of ``torch.cuda.memory_snapshot()``), read in place: no pickle, no file.

    Example::

        torch.cuda.memory._record_memory_history()
        train_steps(3)
        snap = leakscope.from_snapshot(torch.cuda.memory._snapshot())
    """
    return Snapshot(_native.from_object(obj, name))


def _snapshot(source: Any) -> Snapshot:
    """A loaded snapshot from what the functions over snapshots accept: a
    :class:`Snapshot`, a path, the file's bytes, or what ``torch.cuda.memory._snapshot()``
    returns."""
    if isinstance(source, Snapshot):
        return source
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        return load(source)
    if isinstance(source, (dict, list)):
        return from_snapshot(source)
    raise TypeError("expected a leakscope.Snapshot, a path, the file's bytes or the dict of "
                    f"torch.cuda.memory._snapshot(), not {type(source).__name__}")


def compare(a: Union[Snapshot, PathLike], b: Union[Snapshot, PathLike], windows: str = "auto",
            within: Optional[str] = None, by: str = "site", device: Device = None,
            roles: Optional[PathLike] = None, at: Optional[str] = None,
            user_code: Optional[str] = None, exclude: Optional[str] = None,
            focus: Optional[str] = None, python_only: bool = False, keep_internal: bool = False) -> Result:
    """Two runs side by side: growth per site and end state
    (``leakscope compare A B --json``, schema ``leakscope.compare/3``); with ``at``
    (``"peak"``, ``"end"``, ``"oom"``) what each holds at that point, site by site
    (``--at``, schema ``leakscope.compare_at/2``: why the peak moved). Two run
    directories with ``at`` are compared step by step, rank by rank
    (``leakscope.compare_steps/1``; ``to_pandas()``: a row per step, rank and device).

    Example::

        leakscope.compare("forward_only.pickle", "training.pickle").to_pandas()
        leakscope.compare("before.pickle", "after.pickle", at="peak").to_pandas().head()
    """
    opts = _opts(locals(), "a", "b", "at")
    dirs = [isinstance(x, (str, os.PathLike)) and os.path.isdir(x) for x in (a, b)]
    if any(dirs):
        if not (all(dirs) and at):
            raise ValueError("two run directories are compared step by step at a point: "
                             "give both directories and at='peak' (or 'end', 'oom')")
        return Result._from_json("compare_steps", _native.compare_steps(
            os.fspath(a), os.fspath(b), at, opts))
    return Result._from_json(
        "compare_at" if at else "compare",
        _native.compare(_snapshot(a)._native, _snapshot(b)._native, opts, at))


def ranks(directory: PathLike, windows: str = "auto") -> Result:
    """A whole run: every rank and step below ``directory``
    (``leakscope ranks DIR --json``, schema ``leakscope.ranks/5``).

    Example::

        leakscope.ranks("memory_snapshots/").to_pandas().query("outlier")
    """
    return Result._from_json("ranks", _native.ranks(os.fspath(directory), _opts(locals(), "directory")))


def check(paths: Union[PathLike, Snapshot, Sequence[Union[PathLike, Snapshot]]],
          budget: Union[PathLike, str, dict], baseline: Optional[Union[PathLike, dict]] = None,
          windows: Optional[str] = None, roles: Optional[PathLike] = None) -> CheckResult:
    """The CI memory gate (``leakscope check --json``, schema ``leakscope.check/5``):
    ``budget`` is a TOML file (or its text, or its tables as a dict); ``baseline`` an earlier ``check`` or
    ``leaks`` JSON file (or its dict); ``roles`` a TOML file with a ``[roles]`` table (as
    ``--roles``; the budget's own ``[roles]`` otherwise). The result's ``passed`` says
    whether every limit held.

    Example::

        r = leakscope.check(["run.pickle"], "leakscope.toml")
        assert r.passed, r.failures()
    """
    items: Iterable = [paths] if isinstance(paths, (str, os.PathLike, Snapshot)) else paths
    sessions = [_snapshot(p)._native for p in items]
    budget_data = budget if isinstance(budget, dict) else _text(budget)
    baseline_text = None
    if isinstance(baseline, dict):
        baseline_text = json.dumps(baseline)
    elif baseline is not None:
        baseline_text = _native.read_small_text(os.fspath(baseline))
    roles_path = None if roles is None else os.fspath(roles)
    data, text, junit = _native.check(sessions, budget_data, baseline_text, windows, roles_path)
    return CheckResult(json.loads(data), junit, text)


def _text(v: Union[PathLike, str]) -> str:
    """A file's text, or the text itself when it does not name a file (a TOML string)."""
    if isinstance(v, str) and ("\n" in v or "=" in v):
        return v
    return _native.read_small_text(os.fspath(v))
