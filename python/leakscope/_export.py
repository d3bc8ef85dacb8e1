"""Exports for the tools people already use: Parquet tables of whole runs, a Perfetto
timeline of one or more files (ranks) and pprof profiles by allocation stack. Each returns
what was written as a dict (the JSON ``leakscope export ... --json`` prints)."""

from __future__ import annotations

import json
import os
from typing import List, Optional, Sequence, Union

from . import _native
from ._snapshot import Device, _opts

PathLike = Union[str, "os.PathLike[str]"]


def _paths(paths: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return [os.fspath(p) for p in items]


def export_parquet(paths: Union[PathLike, Sequence[PathLike]], out_dir: PathLike,
                   windows: Optional[str] = None, device: Device = None,
                   roles: Optional[PathLike] = None) -> dict:
    """Files and run directories as seven Parquet tables in ``out_dir`` (files, ranks,
    suspects, top_sites, events, stacks, series; schema ``leakscope.export/1``). ``suspects``,
    ``top_sites`` and ``events`` have a ``role`` column: the memory role of the suspect,
    of most of the site's bytes, of the allocation an event belongs to (null for segment
    events). ``roles``: a TOML file with a ``[roles]`` table (``--roles``); ``windows``
    and ``device`` as the command line's.

    Example::

        leakscope.export_parquet("memory_snapshots/", "tables")
    """
    return json.loads(_native.export_parquet(_paths(paths), os.fspath(out_dir),
                                             _opts(locals(), "paths", "out_dir")))


def export_perfetto(paths: Union[PathLike, Sequence[PathLike]], out: PathLike,
                    windows: Optional[str] = None, device: Device = None,
                    roles: Optional[PathLike] = None, top_sites: int = 8) -> dict:
    """Files and run directories as one Perfetto trace at ``out`` (gzipped when it ends in
    ``.gz``): a process per file, counters of live, allocated and reserved bytes, of the
    largest sites and of each memory role (``role: parameter``, ...), slices for windows
    and ``record_function`` ranges, instants at the peak, OOMs and leak onsets (schema
    ``leakscope.export.perfetto/1``). ``roles``: a TOML file with a ``[roles]`` table
    (``--roles``); ``top_sites``: the sites with a counter of their own (``--top-sites``).
    Open it at https://ui.perfetto.dev.

    Example::

        leakscope.export_perfetto("memory_snapshots/step3", "step3.perfetto-trace")
    """
    return json.loads(_native.export_perfetto(
        _paths(paths), os.fspath(out), _opts(locals(), "paths", "out", "top_sites"), top_sites))


def export_pprof(path: PathLike, out: PathLike, at: str = "end", growth: bool = False,
                 windows: Optional[str] = None, device: Device = None,
                 roles: Optional[PathLike] = None) -> dict:
    """One file's gzipped pprof profile at ``out``: live bytes and allocations by stack at
    ``at`` (``end``, ``peak``, ``oom``, ``event:N``, ``time:US``), or with ``growth`` the
    bytes per window each stack kept past the next window (schema
    ``leakscope.export.pprof/1``). Every sample has a ``device`` label and a ``role``
    label (the memory role of its allocations). ``roles``: a TOML file with a ``[roles]``
    table (``--roles``). Open it with ``go tool pprof -http=: OUT`` or speedscope.

    Example::

        leakscope.export_pprof("run.pickle", "leak.pb.gz", growth=True)
    """
    return json.loads(_native.export_pprof(os.fspath(path), os.fspath(out), at, growth,
                                           _opts(locals(), "path", "out", "at", "growth")))
