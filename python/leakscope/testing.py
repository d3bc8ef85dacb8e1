"""Assertions for tests that check CUDA memory with leakscope (docs/python.md).

``assert_no_leaks`` fails when a call site keeps more than a limit per window (a step, a
micro-batch), naming the site, its rate, how many windows grew and since which;
``assert_memory_below`` when a device's peak (or end) is over a limit. The pytest markers
of :mod:`leakscope.pytest_plugin` record a snapshot and call ``assert_no_leaks`` on it.

Example::

    import leakscope.testing as lt
    lt.assert_no_leaks("run.pickle", "1 MiB", windows=r"annotation:^step$")
    lt.assert_memory_below("run.pickle", "60 GiB", "peak_requested")
"""

from __future__ import annotations

import json
import os
from typing import Any, Union

import leakscope
from leakscope import _native
from leakscope._native import format_size, parse_size
from leakscope._snapshot import _snapshot

__all__ = ["MEMORY_MEASURES", "assert_memory_below", "assert_no_leaks", "format_size",
           "parse_size"]

#: A byte count: an ``int``, or a string such as ``"512 KiB"`` (see :func:`parse_size`).
Size = Union[int, str]

#: What the assertions read: a loaded snapshot, a file, the file's bytes, or what
#: ``torch.cuda.memory._snapshot()`` returns.
SnapshotSource = Union["leakscope.Snapshot", str, "os.PathLike[str]", bytes, dict, list]

#: What :func:`assert_memory_below` can limit: the measures of leakscope's CI gate, each
#: with what it measures.
MEMORY_MEASURES = dict(_native.memory_measures())


def assert_no_leaks(
    snapshot_or_path: SnapshotSource,
    limit: Size,
    windows: str = "auto",
    *,
    within: str | None = None,
    device: int | None = None,
) -> dict[str, Any]:
    """Fail when a suspect (``leak`` or ``retained``) keeps more than ``limit`` bytes per
    window, or when no device can be judged (a check that cannot see growth does not
    pass); the message names each site, kind, rate, windows grown and onset. Returns the
    ``leakscope.leaks/8`` report otherwise.

    ``snapshot_or_path``: a :class:`leakscope.Snapshot`, a file, its bytes, or the dict
    ``torch.cuda.memory._snapshot()`` returns; ``limit``: a :func:`parse_size` size;
    ``windows``, ``within``, ``device``: as :meth:`leakscope.Snapshot.leaks` takes them.

    >>> assert_no_leaks("control.pickle", "1 MiB")  # doctest: +SKIP
    >>> assert_no_leaks(snapshot, 2**20, windows=r"annotation:^step$")  # doctest: +SKIP
    """
    __tracebackhide__ = True
    options = {"windows": windows or "auto", "within": within, "device": device}
    data, failure = _snapshot(snapshot_or_path)._native.leaks_over(
        parse_size(limit), {k: v for k, v in options.items() if v is not None})
    if failure is not None:
        raise AssertionError(failure)
    return json.loads(data)


def assert_memory_below(
    snapshot_or_path: SnapshotSource,
    limit: Size,
    what: str = "peak_requested",
    *,
    device: int | None = None,
) -> dict[int, int]:
    """Fail when a device's ``what`` (one of :data:`MEMORY_MEASURES`, as ``leakscope
    check`` measures it) exceeds ``limit``, naming each such device and its figure;
    returns ``{device: bytes}`` otherwise. ``device``: only that one.

    >>> assert_memory_below("run.pickle", "60 GiB")  # doctest: +SKIP
    {0: 4217852004}
    """
    __tracebackhide__ = True
    figures, failure = _snapshot(snapshot_or_path)._native.memory_over(
        what, parse_size(limit), device)
    if failure is not None:
        raise AssertionError(failure)
    return figures
