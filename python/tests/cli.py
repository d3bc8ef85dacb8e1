"""The command line the tests compare with and drive: the newest cargo-built binary when
there is one (``cargo test`` builds the debug one before pytest runs; a release binary left
by a benchmark may be older), else the command this package installed (the same code, run
in process)."""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli() -> list[str]:
    """The command as a list for ``subprocess.run``."""
    built = [b for b in (ROOT / "target" / "release" / "leakscope",
                         ROOT / "target" / "debug" / "leakscope") if b.exists()]
    if built:
        return [str(max(built, key=lambda b: b.stat().st_mtime))]
    exe = shutil.which("leakscope", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "leakscope"]
