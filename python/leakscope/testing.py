"""Assertions for tests that check CUDA memory with leakscope.

``assert_no_leaks`` fails a test when a call site keeps more memory per unit of work
(per *window*: a step, a micro-batch) than a limit allows; the failure names the site, the
rate, how many windows grew and since which. ``assert_memory_below`` fails when the peak
(or the end) of a device's memory is over a limit. ``parse_size`` and ``format_size`` read
and write the byte sizes the limits are given in.

Example::

    import leakscope.testing as lt

    def test_training_loop_does_not_leak():
        lt.assert_no_leaks("run.pickle", "1 MiB", windows=r"annotation:^step$")
        lt.assert_memory_below("run.pickle", "60 GiB", "peak_requested")

The pytest markers of :mod:`leakscope.pytest_plugin` record the snapshot themselves and
call ``assert_no_leaks`` on it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Union

import leakscope
from leakscope import _native
from leakscope._snapshot import _snapshot

__all__ = [
    "MEMORY_MEASURES",
    "assert_memory_below",
    "assert_no_leaks",
    "format_size",
    "parse_size",
]

#: A byte count: an ``int``, or a string such as ``"512 KiB"`` (see :func:`parse_size`).
Size = Union[int, str]

#: What the assertions read: a loaded snapshot, a file, the file's bytes, or what
#: ``torch.cuda.memory._snapshot()`` returns.
SnapshotSource = Union["leakscope.Snapshot", str, "os.PathLike[str]", bytes, dict, list]

#: What :func:`assert_memory_below` can limit: the measures of leakscope's CI gate, each
#: with what it measures.
MEMORY_MEASURES = dict(_native.memory_measures())


def parse_size(size: Size) -> int:
    """Return the number of bytes that ``size`` names, as a budget reads it (the library's
    own reader).

    ``size`` is a non-negative ``int`` (bytes), or a string: a number, optionally with a
    fraction, then optionally a unit, case-insensitive: ``B``; ``KB``, ``MB``, ``GB``,
    ``TB`` (powers of 1000); ``KiB``, ``MiB``, ``GiB``, ``TiB`` or ``K``, ``M``, ``G``,
    ``T`` (powers of 1024), rounded to the nearest byte. Anything else raises
    ``leakscope.UsageError`` (a ``ValueError``; ``TypeError`` for a value that is neither
    an ``int`` nor a string).

    >>> parse_size("1 MiB")
    1048576
    >>> parse_size("1.5 MB")
    1500000
    >>> parse_size(4096)
    4096
    """
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise TypeError(f"a size is an int or a string such as '1 MiB', not {size!r}")
    if isinstance(size, int):
        if size < 0:
            raise ValueError(f"a size cannot be negative: {size}")
        return size
    return _native.parse_size(size)


def format_size(n: int, *, exact: bool = False) -> str:
    """Return ``n`` bytes as every leakscope output writes them; with ``exact``, the exact
    count follows where the unit rounds it.

    >>> format_size(16777216)
    '16.0 MiB'
    >>> format_size(100)
    '100 B'
    >>> format_size(155582464, exact=True)
    '148 MiB (155,582,464 B)'
    """
    return _native.format_size(n, exact)


def assert_no_leaks(
    snapshot_or_path: SnapshotSource,
    limit: Size,
    windows: str = "auto",
    *,
    within: str | None = None,
    device: int | None = None,
) -> dict[str, Any]:
    """Fail unless every call site grows by at most ``limit`` bytes per window.

    ``snapshot_or_path`` is a :class:`leakscope.Snapshot`, a path to a snapshot file, the
    file's bytes, or the dict ``torch.cuda.memory._snapshot()`` returns. ``limit`` is bytes
    per window, an ``int`` or a string such as ``"1 MiB"`` (:func:`parse_size`).
    ``windows``, ``within`` and ``device`` are the keywords of
    :meth:`leakscope.Snapshot.leaks` (the units of work, the phase of each to keep, the
    one device to look at).

    Raises ``AssertionError`` when a suspect of kind ``leak`` or ``retained`` on any device
    keeps more than ``limit`` bytes per window; the message names each such site, its kind,
    its rate (readable and exact), how many windows grew of how many, since which window,
    the device and how its windows were made. Also raises ``AssertionError`` when no device
    can be judged (no verdicts, or a single window): a leak check that cannot see growth
    does not pass. Returns the ``leakscope.leaks/8`` report (a dict) otherwise.

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
    """Fail when a device's memory, measured as ``what``, exceeds ``limit``.

    ``what`` is one of :data:`MEMORY_MEASURES`, as ``leakscope check`` measures it;
    ``limit`` is bytes or a size string; ``device`` restricts the check to one device.
    Raises ``AssertionError`` naming each device over the limit and its figure (worded by
    the library, as the CLI sizes it); returns ``{device: bytes}`` otherwise.

    >>> assert_memory_below("run.pickle", "60 GiB")  # doctest: +SKIP
    {0: 4217852004}
    """
    __tracebackhide__ = True
    figures, failure = _snapshot(snapshot_or_path)._native.memory_over(
        what, parse_size(limit), device)
    if failure is not None:
        raise AssertionError(failure)
    return figures
