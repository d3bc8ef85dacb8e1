"""Exports for the viewers people already use: a Perfetto timeline of one or more files
(ranks) and pprof profiles by allocation stack. Both return what was written as a dict
(the JSON ``leakscope export ... --json`` prints)."""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence, Union

from . import _native

PathLike = Union[str, "os.PathLike[str]"]


def export_perfetto(paths: Union[PathLike, Sequence[PathLike]], out: PathLike,
                    windows: Optional[str] = None) -> dict:
    """Files and run directories as one Perfetto trace at ``out`` (gzipped when it ends in
    ``.gz``): a process per file, counters of live, allocated and reserved bytes and the
    largest sites, slices for windows and ``record_function`` ranges, instants at the peak,
    OOMs and leak onsets (schema ``leakscope.export.perfetto/1``). Open it at
    https://ui.perfetto.dev.

    Example::

        leakscope.export_perfetto("memory_snapshots/step3", "step3.perfetto-trace")
    """
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return json.loads(_native.export_perfetto([os.fspath(p) for p in items], os.fspath(out),
                                              windows))


def export_pprof(path: PathLike, out: PathLike, at: str = "end", growth: bool = False,
                 windows: Optional[str] = None) -> dict:
    """One file's gzipped pprof profile at ``out``: live bytes and allocations by stack at
    ``at`` (``end``, ``peak``, ``oom``, ``event:N``, ``time:US``), or with ``growth`` the
    bytes per window each stack kept past the next window (schema
    ``leakscope.export.pprof/1``). Open it with ``go tool pprof -http=: OUT`` or speedscope.

    Example::

        leakscope.export_pprof("run.pickle", "leak.pb.gz", growth=True)
    """
    return json.loads(_native.export_pprof(os.fspath(path), os.fspath(out), at, growth, windows))
