#!/usr/bin/env bash
# `leakscope mcp` (the MCP server, rmcp in the binary) against the command line.
#
#   benches/mcp.sh [FILE]
#
# Without FILE, generates a ~372 MB snapshot with benches/gen_big_snapshot.py in a temporary
# directory (removed at the end). Then, in the same run (benches/mcp_bench.py, the MCP Python
# SDK's client over stdio):
#   1. start-up: spawn -> `initialize` answered -> `tools/list` answered, best of
#      BENCH_STARTUP_RUNS, for `leakscope mcp` and for the same server run by the Python
#      package (`python -m leakscope mcp`), and for BENCH_MCP_ALT when set;
#   2. the acceptance figures, best of BENCH_RUNS each:
#      (a) `leakscope summary FILE` with the release binary, the whole process;
#      (b) ten questions as Snapshot method calls in one Python process, the file loaded
#          once beforehand (not counted): the answers alone;
#      (c) `leakscope mcp` spawned by the client and asked the same ten questions: from
#          the spawn to the last answer (and (c'): the same with a client reading lines);
#      ratio = (c) / ((a) + (b)).
# The figures go to stdout as JSON, progress to stderr.
#
# Environment:
#   BENCH_SIZE_MB       size of the generated file (MB, 10^6 bytes), default 370 (writes 372 MB)
#   BENCH_SEED          generator seed, default 1
#   BENCH_RUNS          runs of (a), (b) and (c), default 3
#   BENCH_STARTUP_RUNS  runs of each start-up, default 5
#   BENCH_PYTHON        a Python with leakscope and mcp installed (default target/py-venv/bin/python;
#                       scripts/test-all.sh makes it)
#   BENCH_MCP_ALT       another MCP server command whose start-up to time the same way
#   LEAKSCOPE_BIN       binary for (a) instead of building target/release/leakscope
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

SIZE_MB=${BENCH_SIZE_MB:-370}
SEED=${BENCH_SEED:-1}
RUNS=${BENCH_RUNS:-3}
STARTUP_RUNS=${BENCH_STARTUP_RUNS:-5}
PYTHON=${BENCH_PYTHON:-target/py-venv/bin/python}

log() { printf '%s\n' "$*" >&2; }
die() { log "mcp.sh: $*"; exit 1; }

"$PYTHON" -c 'import leakscope, mcp' 2>/dev/null \
    || die "$PYTHON cannot import leakscope and mcp (scripts/test-all.sh, or set BENCH_PYTHON)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

FILE=${1:-}
if [[ -z "$FILE" ]]; then
    FILE=$TMP/big.pickle
    log "generating $FILE (${SIZE_MB} MB, seed $SEED)..."
    python3 benches/gen_big_snapshot.py --size-mb "$SIZE_MB" --seed "$SEED" -o "$FILE" >&2
fi
[[ -f "$FILE" ]] || die "no such file: $FILE"

if [[ -n "${LEAKSCOPE_BIN:-}" ]]; then
    BIN=$LEAKSCOPE_BIN
    log "using LEAKSCOPE_BIN=$BIN (not building)"
else
    log "cargo build --release..."
    cargo build --release >&2
    BIN=target/release/leakscope
fi
[[ -x "$BIN" ]] || die "not executable: $BIN"

log "start-up: leakscope mcp..."
"$PYTHON" benches/mcp_bench.py startup --runs "$STARTUP_RUNS" -- "$BIN" mcp
log "start-up: python -m leakscope mcp..."
"$PYTHON" benches/mcp_bench.py startup --runs "$STARTUP_RUNS" -- "$PYTHON" -m leakscope mcp
if [[ -n "${BENCH_MCP_ALT:-}" ]]; then
    log "start-up: $BENCH_MCP_ALT..."
    read -r -a alt <<<"$BENCH_MCP_ALT"
    "$PYTHON" benches/mcp_bench.py startup --runs "$STARTUP_RUNS" -- "${alt[@]}"
fi

log "ten questions: the command line, the package, the MCP server..."
"$PYTHON" benches/mcp_bench.py questions "$FILE" --cli "$BIN" --runs "$RUNS" \
    --server "$BIN mcp"
