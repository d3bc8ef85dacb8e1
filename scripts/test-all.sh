#!/usr/bin/env bash
# Every test: the Rust suite (`cargo test`, arguments passed on), then the Python package
# built with maturin into a virtualenv (target/py-venv, or $LEAKSCOPE_VENV) and its
# pytest suite (python/tests). Needs cargo and python3 (3.9 or later) with venv; pip
# fetches maturin, pytest, pandas, ray (leakscope.ray's two-node local cluster) and
# duckdb (queries of the Parquet export), perfetto, protobuf and grpcio-tools (decoding the
# Perfetto and pprof exports with the official definitions) from PyPI the first time (about 25 s,
# 530 MB), and mcp (the MCP SDK, whose client drives `leakscope mcp`; 36 MB with what it needs).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test"
cargo test "$@"

VENV=${LEAKSCOPE_VENV:-target/py-venv}
echo "== python package (maturin, into $VENV)"
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check pytest pandas ray duckdb perfetto protobuf grpcio-tools "mcp>=2,<3"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps .

echo "== pytest"
"$VENV/bin/python" -m pytest python/tests -q
