"""leakscope: what holds GPU memory, what grows per micro-batch and where it was allocated,
why an OOM happened, which rank differs, from PyTorch CUDA and Ascend NPU memory snapshots.

The engine is Rust (the same as the ``leakscope`` command, which this package also
installs); loading and analysing release the GIL.

Example::

    import leakscope
    snap = leakscope.load("run.pickle")          # or leakscope.from_snapshot(torch.cuda.memory._snapshot())
    snap.leaks().to_pandas()                      # sites that grow per micro-batch
    snap.top(at="peak")                           # what holds memory at the peak
    snap.report("report.html")                    # the offline HTML report
"""

from ._errors import LeakscopeError, ReadError, SnapshotError, UsageError, WriteError
from ._native import CheckResult, Result, __version__, default_max_decompressed_bytes
from ._export import export_parquet, export_perfetto, export_pprof
from ._snapshot import Snapshot, check, compare, from_snapshot, load, load_series, ranks

__all__ = ["CheckResult", "LeakscopeError", "ReadError", "Result", "Snapshot", "SnapshotError",
           "UsageError", "WriteError", "__version__", "check", "compare",
           "default_max_decompressed_bytes", "export_parquet", "export_perfetto", "export_pprof",
           "from_snapshot", "load", "load_series", "ranks"]
