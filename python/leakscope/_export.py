"""Exports for the tools people already use: Parquet tables of whole runs, a Perfetto
timeline of one or more files (ranks) and pprof profiles by allocation stack. Each returns
what was written as a dict (the JSON ``leakscope export ... --json`` prints)."""

from __future__ import annotations

import os
from typing import Any, Sequence, Union

from . import _native
from ._command import command

PathLike = Union[str, "os.PathLike[str]"]


@command("export", "parquet")
def export_parquet(paths: Union[PathLike, Sequence[PathLike]], out_dir: PathLike,
                   **options: Any) -> dict:
    """Files and run directories as Parquet tables in ``out_dir`` (files, ranks, suspects,
    top_sites, events, stacks, series; schema ``leakscope.export/1``).

    Example: ``leakscope.export_parquet("memory_snapshots/", "tables")``
    """
    return _native.export_parquet(paths, out_dir, options)


@command("export", "perfetto")
def export_perfetto(paths: Union[PathLike, Sequence[PathLike]], out: PathLike,
                    **options: Any) -> dict:
    """Files and run directories as one Perfetto trace at ``out`` (gzipped when it ends in
    ``.gz``): a process per file, counters of live, allocated and reserved bytes, of the
    largest sites and of each memory role, slices for windows and ``record_function``
    ranges, instants at the peak, OOMs and leak onsets. Open it at https://ui.perfetto.dev.

    Example: ``leakscope.export_perfetto("memory_snapshots/step3", "step3.perfetto-trace")``
    """
    return _native.export_perfetto(paths, out, options)


@command("export", "pprof")
def export_pprof(path: PathLike, out: PathLike, **options: Any) -> dict:
    """One file's gzipped pprof profile at ``out``: live bytes and allocations by stack at
    ``at``, or with ``growth`` the bytes per window each stack kept past the next window;
    every sample has ``device`` and ``role`` labels. Open it with ``go tool pprof -http=:
    OUT`` or speedscope.

    Example: ``leakscope.export_pprof("run.pickle", "leak.pb.gz", growth=True)``
    """
    return _native.export_pprof(path, out, options)
