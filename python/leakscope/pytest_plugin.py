"""pytest plugin (entry point ``pytest11``, installed with leakscope; docs/python.md):
CUDA memory limits on tests as two markers, ``limit_cuda_memory`` (the peak allocated
during the test body) and ``limit_cuda_leaks`` (growth per run of the body, each run a
window), described in ``_MARKERS`` (``pytest --markers``). Without torch or CUDA, marked
tests are skipped with the reason; ``--leakscope-report DIR`` keeps each failing leak
check's snapshot and HTML report.

Example::

    @pytest.mark.limit_cuda_leaks("1 MiB")
    @pytest.mark.limit_cuda_memory("2 GiB")
    def test_train_step(model, batch):
        model(batch).sum().backward()
"""

from __future__ import annotations

import dataclasses
import gc
import pickle
import re
from pathlib import Path
from typing import Any, Callable

import pytest

import leakscope
from leakscope import _native
from leakscope.testing import Size, assert_no_leaks, format_size, parse_size

__all__ = ["ANNOTATION", "DEFAULT_WINDOWS", "LeakOptions", "MemoryOptions", "check_leaks",
           "report_paths"]

#: The ``record_function`` name each run of a ``limit_cuda_leaks`` test is wrapped in.
ANNOTATION = "leakscope_repeat"
#: Windows of ``limit_cuda_leaks`` by default: one per run of the test body. The regex is
#: anchored: annotation windows match names by search, and ``Optimizer.step`` records an
#: annotation ``Optimizer.step#Adam.step`` of its own.
DEFAULT_WINDOWS = f"annotation:^{ANNOTATION}$"

_MEMORY = "limit_cuda_memory"
_LEAKS = "limit_cuda_leaks"
_MARKERS = {
    _MEMORY: (
        "limit_cuda_memory(limit, device=None): fail when the peak CUDA memory allocated "
        "during the test body exceeds limit (bytes, or a size such as '2 GiB'). Skipped "
        "without torch or CUDA."
    ),
    _LEAKS: (
        # pytest splits a marker line at its first colon: the signature holds none.
        "limit_cuda_leaks(limit, windows=DEFAULT_WINDOWS, repeat=3, within=None, "
        "max_entries=100000): run the test body repeat times with the CUDA memory history "
        f"recorded, each run inside record_function('{ANNOTATION}'), and fail when a call "
        "site keeps more than limit (bytes, or a size such as '1 MiB') per window. "
        f"DEFAULT_WINDOWS is {DEFAULT_WINDOWS}, one window per run. "
        "Skipped without torch or CUDA."
    ),
}


@dataclasses.dataclass(frozen=True)
class MemoryOptions:
    """The arguments of a ``limit_cuda_memory`` marker (its signature), checked.

    >>> MemoryOptions("2 GiB").limit
    2147483648
    """

    limit: Size
    device: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "limit", parse_size(self.limit))


@dataclasses.dataclass(frozen=True)
class LeakOptions:
    """The arguments of a ``limit_cuda_leaks`` marker (its signature), checked.

    >>> options = LeakOptions("1 MiB", repeat=4)
    >>> options.limit, options.windows, options.repeat
    (1048576, 'annotation:^leakscope_repeat$', 4)
    """

    limit: Size
    windows: str = DEFAULT_WINDOWS
    repeat: int = 3
    within: str | None = None
    max_entries: int = 100_000

    def __post_init__(self) -> None:
        for name in ("repeat", "max_entries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, not {value!r}")
        object.__setattr__(self, "limit", parse_size(self.limit))


def report_paths(report_dir: str | Path, nodeid: str) -> tuple[Path, Path]:
    """The snapshot and HTML report paths for test ``nodeid`` in ``report_dir`` (each
    run of characters other than letters, digits, ``.``, ``-`` and ``_`` becomes ``_``).

    >>> [p.name for p in report_paths("out", "tests/test_a.py::test_b[x-1]")]
    ['tests_test_a.py_test_b_x-1.pickle', 'tests_test_a.py_test_b_x-1.html']
    """
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid).strip("_")[:200] or "test"
    report_dir = Path(report_dir)
    return report_dir / f"{stem}.pickle", report_dir / f"{stem}.html"


def check_leaks(snapshot: dict, limit: Size, *, windows: str = DEFAULT_WINDOWS,
                within: str | None = None, report_dir: str | Path | None = None,
                nodeid: str = "snapshot") -> dict[str, Any]:
    """The leak check of ``limit_cuda_leaks``: :func:`leakscope.testing.assert_no_leaks`
    on ``torch.cuda.memory._snapshot()``'s dict. When it fails and ``report_dir`` is
    given, the snapshot and an HTML report are written there (:func:`report_paths` of
    ``nodeid``) and the ``AssertionError`` names both.

    >>> with open("run.pickle", "rb") as f:  # doctest: +SKIP
    ...     check_leaks(pickle.load(f), "1 MiB", windows="auto", report_dir="out")
    """
    __tracebackhide__ = True
    loaded = leakscope.from_snapshot(snapshot)
    try:
        return assert_no_leaks(loaded, limit, windows=windows, within=within)
    except AssertionError as error:
        if report_dir is None:
            raise
        pickle_path, html_path = report_paths(report_dir, nodeid)
        pickle_path.parent.mkdir(parents=True, exist_ok=True)
        _native.write_output(str(pickle_path), pickle.dumps(snapshot), [])
        loaded.report(html_path, windows=windows, within=within)
        raise AssertionError(f"{error}\nleakscope: snapshot written to {pickle_path}, "
                             f"report to {html_path}") from None


def _cuda_missing() -> str | None:
    """Why the markers cannot run here, or ``None`` when torch with CUDA is available."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return None


def _record(torch: Any, body: Callable[[], object], options: LeakOptions) -> dict:
    """Runs ``body`` ``options.repeat`` times with the memory history recorded, each run
    inside ``record_function(ANNOTATION)`` and ending with a garbage collection (memory
    only a reference cycle kept is freed in its own run); returns the snapshot, taken
    before recording stops (which clears it)."""
    memory = torch.cuda.memory
    memory._record_memory_history(max_entries=options.max_entries, stacks="python")
    try:
        for _ in range(options.repeat):
            with torch.profiler.record_function(ANNOTATION):
                body()
                gc.collect()
        return memory._snapshot()
    finally:
        memory._record_memory_history(enabled=None)


_memory_key = pytest.StashKey[MemoryOptions]()
_leaks_key = pytest.StashKey[LeakOptions]()
_inner_key = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--leakscope-report DIR``."""
    parser.getgroup("leakscope").addoption(
        "--leakscope-report", metavar="DIR", default=None,
        help="write the snapshot (NODEID.pickle) and an HTML report (NODEID.html) of "
        "each test that fails its limit_cuda_leaks check into DIR")


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers."""
    for line in _MARKERS.values():
        config.addinivalue_line("markers", line)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Checks the markers' arguments, then skips when torch or CUDA is missing (before
    the test's fixtures, so a skipped test builds none of them)."""
    parsers = {_MEMORY: (MemoryOptions, _memory_key), _LEAKS: (LeakOptions, _leaks_key)}
    found = {}
    for name, (parse, key) in parsers.items():
        marker = item.get_closest_marker(name)
        if marker is None:
            continue
        try:
            found[key] = parse(*marker.args, **marker.kwargs)
        except (TypeError, ValueError) as error:
            pytest.fail(f"leakscope: bad arguments to {name}: {error}", pytrace=False)
    if not found:
        return
    missing = _cuda_missing()
    if missing is not None:
        names = " and ".join(n for n, (_, k) in parsers.items() if k in found)
        pytest.skip(f"leakscope: {names} needs torch with CUDA; {missing}")
    for key, options in found.items():
        item.stash[key] = options


def _leak_failure(item: pytest.Item, snapshot: dict, options: LeakOptions) -> str | None:
    """The failure message of the leak check of ``item``, or ``None`` when it passes."""
    report_dir = item.config.getoption("leakscope_report")
    if report_dir is not None:
        report_dir = item.config.invocation_params.dir / report_dir
    try:
        check_leaks(snapshot, options.limit, windows=options.windows, within=options.within,
                    report_dir=report_dir, nodeid=item.nodeid)
    except AssertionError as error:
        return str(error)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs a marked test body under its limits (the body through the other
    ``pytest_pyfunc_call`` implementations, the default or an async plugin's, once per
    repeat); a test over both limits fails naming both."""
    memory = pyfuncitem.stash.get(_memory_key, None)
    leaks = pyfuncitem.stash.get(_leaks_key, None)
    if pyfuncitem.stash.get(_inner_key, False) or (memory is None and leaks is None):
        return None
    import torch

    def body() -> None:
        pyfuncitem.stash[_inner_key] = True
        try:
            pyfuncitem.ihook.pytest_pyfunc_call(pyfuncitem=pyfuncitem)
        finally:
            pyfuncitem.stash[_inner_key] = False

    if memory is not None:
        device = torch.cuda.current_device() if memory.device is None else memory.device
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    if leaks is None:
        body()
    else:
        snapshot = _record(torch, body, leaks)

    failures = []
    if memory is not None:
        peak = torch.cuda.max_memory_allocated(device)
        if peak > memory.limit:
            failures.append(f"leakscope: peak CUDA memory allocated on device {device} was "
                            f"{format_size(peak, exact=True)}, over the limit of "
                            f"{format_size(memory.limit, exact=True)}; "
                            f"{format_size(before, exact=True)} was allocated when the test "
                            "began")
    if leaks is not None:
        failures.append(_leak_failure(pyfuncitem, snapshot, leaks))
    failures = [f for f in failures if f]
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)
    return True
