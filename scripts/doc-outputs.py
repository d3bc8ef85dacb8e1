#!/usr/bin/env python3
"""Keeps the command outputs quoted in the docs true: every fenced block that starts with
``$ leakscope ...`` (continued over lines ending in a backslash) is run from the repository
root with ``NO_COLOR=1`` and its output written below the command. A block whose output
holds a line ``...`` keeps only as many lines before and after it as it had.

    scripts/doc-outputs.py [--check] [--leakscope CMD] [FILE.md ...]

``--check`` changes nothing and exits 1 when a quoted output differs (the test suite runs
it); the default files are README.md and docs/pipeline-case.md, whose blocks are whole
outputs. A block with a second ``$`` command is an illustration and is left alone. CMD
defaults to target/release/leakscope.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```[a-z]*\n(\$ leakscope .*?)^```\n", re.M | re.S)


def run(cmd: str, leakscope: list) -> list:
    args = shlex.split(cmd)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    p = subprocess.run(leakscope + args[1:], cwd=ROOT, env=env, capture_output=True, text=True)
    return (p.stdout + p.stderr).rstrip("\n").split("\n")


def refresh(block: str, leakscope: list) -> str:
    lines = block.rstrip("\n").split("\n")
    if sum(x.startswith("$ ") for x in lines) > 1:
        return block
    n = 1
    while lines[n - 1].endswith("\\"):
        n += 1
    cmd = " ".join(x.rstrip("\\").strip() for x in lines[:n])[2:]
    old = lines[n:]
    new = run(cmd, leakscope)
    if "..." in old:
        k = old.index("...")
        tail = len(old) - k - 1
        new = new[:k] + ["..."] + (new[-tail:] if tail else [])
    return "\n".join(lines[:n] + new) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--leakscope", default=str(ROOT / "target" / "release" / "leakscope"))
    ap.add_argument("files", nargs="*", type=Path)
    a = ap.parse_args()
    files = a.files or [ROOT / "README.md", ROOT / "docs" / "pipeline-case.md"]
    leakscope = shlex.split(a.leakscope)
    stale = []
    for f in files:
        text = f.read_text()
        out = FENCE.sub(lambda m: m.group(0).replace(m.group(1), refresh(m.group(1), leakscope)),
                        text)
        if out != text:
            stale.append(f)
            if not a.check:
                f.write_text(out)
    for f in stale:
        print(f"{'stale' if a.check else 'refreshed'}: {f.relative_to(ROOT)}")
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
