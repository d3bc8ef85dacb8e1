"""The outputs quoted in README.md and docs/pipeline-case.md are what the command prints
today: ``scripts/doc-outputs.py --check`` reruns each and compares."""

import shlex
import subprocess
import sys

from cli import ROOT, cli


def test_quoted_outputs_are_current():
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "doc-outputs.py"), "--check",
         "--leakscope", shlex.join(cli())],
        capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr + "\n(run scripts/doc-outputs.py to refresh)"
