#!/usr/bin/env bash
# Benchmark leakscope against CPython's pickle.load on one big snapshot.
#
#   benches/run.sh [FILE]
#
# Without FILE, generates target/bench/big.pickle with benches/gen_big_snapshot.py (reused
# when it exists and was generated with the same size and seed). Builds the release binary
# once, warms the page cache, then times every command with /usr/bin/time (best of N: the
# run with the lowest wall time, and that run's peak RSS). Prints a Markdown table and
# writes it to target/bench/results.md.
#
# Environment:
#   BENCH_SIZE_MB   size of the generated file in MB (10^6 bytes), default 520
#   BENCH_SEED      generator seed, default 1
#   BENCH_RUNS      runs per leakscope command, default 3
#   BENCH_PY_RUNS   runs of the CPython baseline (default: 3, or 2 if the first run takes
#                   over 15 s, or 1 if it takes over 60 s)
#   BENCH_CMDS      leakscope commands to time, ';'-separated (default: the list below)
#   BENCH_EVENTS    trace-event count for the header (default: from FILE.meta.json, else
#                   counted with one extra CPython load)
#   BENCH_SCAN      0 to skip the decode-only opcode scan (benches/scan/decode_scan.rs, built
#                   with rustc -O), the one-core ceiling for any loader
#   BENCH_COMPRESSED 0 to skip the compressed input: FILE compressed with `gzip -6` and
#                   `zstd -3` (kept beside it, remade when older than FILE), `summary` on
#                   each next to the plain file, the decoders alone (`gzip -dc`, `zstd -dc`),
#                   and two decompression bombs (a pickle header, then 2 GiB of zeros as
#                   zstd and 4 GiB as gzip: leakscope must exit 2)
#   BENCH_PYTHON    a Python with the leakscope package installed (scripts/test-all.sh
#                   leaves one in target/py-venv): times `leakscope.load(FILE).summary()`
#                   from Python next to the command line (default: target/py-venv/bin/python
#                   when it can import leakscope)
#   LEAKSCOPE_BIN   binary to time instead of building target/release/leakscope
#   TIME_BIN        GNU time, default /usr/bin/time
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

# leakscope commands to time; FILE is appended to each (or put where `{FILE}` stands). A command whose subcommand the
# binary does not list in `leakscope --help` is skipped, so later ones can be added here
# before they exist.
LEAKSCOPE_CMDS=(
    "summary"
    "summary --json"
    "top --at peak"
    "top --at peak --by role"
    "top --at end --by stack"
    "tree --at peak"
    "flamegraph --at peak -o target/bench/flamegraph.svg"
    "leaks"
    "report -o target/bench/report.html"
    "oom"
    "compare {FILE} {FILE}"
    "export --perfetto target/bench/trace.perfetto-trace"
    "export --pprof target/bench/live.pb.gz --at peak"
)
if [[ -n "${BENCH_CMDS:-}" ]]; then
    IFS=';' read -r -a LEAKSCOPE_CMDS <<<"$BENCH_CMDS"
fi

OUTDIR=target/bench
SIZE_MB=${BENCH_SIZE_MB:-520}
SEED=${BENCH_SEED:-1}
RUNS=${BENCH_RUNS:-3}
TIME_BIN=${TIME_BIN:-/usr/bin/time}
PYTHON=${PYTHON:-python3}

log() { printf '%s\n' "$*" >&2; }
die() { log "run.sh: $*"; exit 1; }

mkdir -p "$OUTDIR"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$TIME_BIN" -f '%e %M' -o "$TMP/t" true 2>/dev/null \
    || die "GNU time not found at $TIME_BIN (apt-get install time, or set TIME_BIN)"

# ---- the snapshot file -------------------------------------------------------------------
meta_get() {  # meta_get FILE KEY -> value from FILE.meta.json, empty when absent
    [[ -f "$1.meta.json" ]] || return 0
    "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' \
        "$1.meta.json" "$2" 2>/dev/null || true
}

FILE=${1:-}
if [[ -z "$FILE" ]]; then
    FILE=$OUTDIR/big.pickle
    if [[ -f "$FILE" ]] \
        && "$PYTHON" -c 'import sys; sys.exit(0 if float(sys.argv[1] or "nan") == float(sys.argv[2]) else 1)' \
            "$(meta_get "$FILE" size_mb_requested)" "$SIZE_MB" 2>/dev/null \
        && [[ "$(meta_get "$FILE" seed)" == "$SEED" ]]; then
        log "reusing $FILE (${SIZE_MB} MB, seed $SEED)"
    else
        log "generating $FILE (${SIZE_MB} MB, seed $SEED)..."
        "$PYTHON" benches/gen_big_snapshot.py --size-mb "$SIZE_MB" --seed "$SEED" -o "$FILE" >&2
    fi
fi
[[ -f "$FILE" ]] || die "no such file: $FILE"
BYTES=$(stat -c %s "$FILE" 2>/dev/null || wc -c <"$FILE")

# ---- the binary --------------------------------------------------------------------------
if [[ -n "${LEAKSCOPE_BIN:-}" ]]; then
    BIN=$LEAKSCOPE_BIN
    log "using LEAKSCOPE_BIN=$BIN (not building)"
else
    log "cargo build --release..."
    cargo build --release >&2
    BIN=target/release/leakscope
fi
[[ -x "$BIN" ]] || die "not executable: $BIN"

# subcommand names listed under "Commands:" in --help (clap layout), one per line
SUBCOMMANDS=$("$BIN" --help 2>/dev/null | awk '
    /^[A-Za-z ]*[Cc]ommands:/ { on = 1; next }
    on && /^[^ \t]/ { on = 0 }
    on && NF { print $1 }' || true)
has_subcommand() { grep -qxF -- "$1" <<<"$SUBCOMMANDS"; }

# ---- measuring ---------------------------------------------------------------------------
# measure RUNS CMD... : sets M_WALL, M_RSS (KiB), M_RUNS, M_OK. stdout goes to /dev/null.
# EXPECT_RC (default 0) is the exit status a run must have.
measure() {
    local runs=$1 i rc w r
    shift
    M_WALL="" M_RSS="" M_RUNS=0 M_OK=1
    for ((i = 1; i <= runs; i++)); do
        rc=0
        "$TIME_BIN" -f '%e %M' -o "$TMP/time" "$@" >/dev/null 2>"$TMP/err" || rc=$?
        if ((rc != ${EXPECT_RC:-0})); then
            log "  failed (exit $rc): $*"
            tail -n 5 "$TMP/err" | sed 's/^/    /' >&2
            M_OK=0
            return 0
        fi
        read -r w r < <(tail -n 1 "$TMP/time")
        M_RUNS=$i
        log "  run $i: ${w} s, ${r} KiB"
        if [[ -z "$M_WALL" ]] || awk -v a="$w" -v b="$M_WALL" 'BEGIN { exit !(a < b) }'; then
            M_WALL=$w M_RSS=$r
        fi
        # a slow first CPython run: fewer runs
        if ((i == 1)) && [[ "${ADAPTIVE:-0}" == 1 ]]; then
            if awk -v a="$w" 'BEGIN { exit !(a > 60) }'; then runs=1
            elif awk -v a="$w" 'BEGIN { exit !(a > 15) }'; then runs=$((runs < 2 ? runs : 2)); fi
        fi
    done
}

LABELS=() WALLS=() RSSES=() NRUNS=()
add_row() { LABELS+=("$1") WALLS+=("$2") RSSES+=("$3") NRUNS+=("$4"); }

log "warming the page cache..."
cat "$FILE" >/dev/null

log "python3 pickle.load..."
if [[ -n "${BENCH_PY_RUNS:-}" ]]; then PYRUNS=$BENCH_PY_RUNS ADAPTIVE=0; else PYRUNS=3 ADAPTIVE=1; fi
ADAPTIVE=$ADAPTIVE measure "$PYRUNS" "$PYTHON" -c "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))" "$FILE"
if ((M_OK)); then
    PY_WALL=$M_WALL
    add_row "python3 pickle.load" "$M_WALL" "$M_RSS" "$M_RUNS"
else
    PY_WALL=""
    add_row "python3 pickle.load" "failed" "" 0
fi

# The ceiling for one core: a scan that steps over every opcode and builds nothing.
SCAN=$OUTDIR/decode_scan
if [[ "${BENCH_SCAN:-1}" == 1 ]] && command -v rustc >/dev/null \
    && rustc -O --edition 2021 benches/scan/decode_scan.rs -o "$SCAN" 2>"$TMP/err"; then
    log "decode-only opcode scan..."
    measure "$RUNS" "$SCAN" "$FILE"
    if ((M_OK)); then
        add_row "decode-only opcode scan (benches/scan/decode_scan.rs)" "$M_WALL" "$M_RSS" "$M_RUNS"
    fi
else
    log "skipping the decode-only scan (BENCH_SCAN=0, or no rustc)"
fi

for cmd in "${LEAKSCOPE_CMDS[@]}"; do
    [[ -n "${cmd// /}" ]] || continue
    read -r -a argv <<<"$cmd"
    if ! has_subcommand "${argv[0]}"; then
        log "skipping 'leakscope $cmd': no '${argv[0]}' subcommand in $BIN --help"
        continue
    fi
    log "leakscope $cmd..."
    if [[ "$cmd" == *"{FILE}"* ]]; then
        argv=("${argv[@]//\{FILE\}/$FILE}")
        measure "$RUNS" "$BIN" "${argv[@]}"
    else
        measure "$RUNS" "$BIN" "${argv[@]}" "$FILE"
    fi
    if ((M_OK)); then
        add_row "leakscope $cmd" "$M_WALL" "$M_RSS" "$M_RUNS"
    else
        add_row "leakscope $cmd" "failed" "" 0
    fi
done

# ---- the Python package -------------------------------------------------------------------
BENCH_PYTHON=${BENCH_PYTHON:-target/py-venv/bin/python}
if [[ -x "$BENCH_PYTHON" ]] && "$BENCH_PYTHON" -c "import leakscope" 2>/dev/null; then
    log "python: leakscope.load(FILE).summary()..."
    measure "$RUNS" "$BENCH_PYTHON" -c "import leakscope, sys; leakscope.load(sys.argv[1]).summary()" "$FILE"
    ((M_OK)) && add_row "python: leakscope.load(FILE).summary()" "$M_WALL" "$M_RSS" "$M_RUNS"
    log "python: import leakscope (start-up alone)..."
    measure "$RUNS" "$BENCH_PYTHON" -c "import leakscope"
    ((M_OK)) && add_row "python: import leakscope (start-up alone)" "$M_WALL" "$M_RSS" "$M_RUNS"
else
    log "skipping the Python package (no $BENCH_PYTHON that imports leakscope)"
fi

# ---- compressed input -------------------------------------------------------------------
if [[ "${BENCH_COMPRESSED:-1}" == 1 ]] && command -v gzip >/dev/null && command -v zstd >/dev/null; then
    for z in "gz:gzip -6 -c" "zst:zstd -q -3 -c"; do
        ext=${z%%:*} tool=${z#*:}
        if [[ ! -f "$FILE.$ext" || "$FILE.$ext" -ot "$FILE" ]]; then
            log "compressing $FILE with $tool..."
            $tool "$FILE" >"$FILE.$ext"
        fi
        cat "$FILE.$ext" >/dev/null
    done
    for z in "gz:gzip" "zst:zstd"; do
        ext=${z%%:*} tool=${z#*:}
        log "$tool -dc (the decoder alone)..."
        measure "$RUNS" sh -c "$tool -dc \"\$1\" >/dev/null" sh "$FILE.$ext"
        ((M_OK)) && add_row "$tool -dc FILE.$ext (the decoder alone)" "$M_WALL" "$M_RSS" "$M_RUNS"
        log "leakscope summary FILE.$ext..."
        measure "$RUNS" "$BIN" summary "$FILE.$ext"
        ((M_OK)) && add_row "leakscope summary FILE.$ext" "$M_WALL" "$M_RSS" "$M_RUNS"
    done
    # Bombs: a pickle header (PROTO 4, an empty FRAME), then zeros; refused at byte 11.
    BOMB_HEAD='\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00'
    if [[ ! -f "$OUTDIR/bomb.zst" ]]; then
        { printf "$BOMB_HEAD"; head -c $((2 << 30)) /dev/zero; } | zstd -q -3 -c >"$OUTDIR/bomb.zst"
    fi
    if [[ ! -f "$OUTDIR/bomb.gz" ]]; then
        { printf "$BOMB_HEAD"; head -c $((4 << 30)) /dev/zero; } | gzip -6 -c >"$OUTDIR/bomb.gz"
    fi
    for b in bomb.zst bomb.gz; do
        log "leakscope summary $b (must exit 2)..."
        EXPECT_RC=2 measure "$RUNS" "$BIN" summary "$OUTDIR/$b"
        ((M_OK)) && add_row "leakscope summary $b ($(stat -c %s "$OUTDIR/$b") bytes; exit 2)" "$M_WALL" "$M_RSS" "$M_RUNS"
    done
fi

# ---- header and table --------------------------------------------------------------------
EVENTS=${BENCH_EVENTS:-$(meta_get "$FILE" events)}
if [[ -z "$EVENTS" ]]; then
    log "counting trace events (one more CPython load)..."
    EVENTS=$("$PYTHON" -c "import pickle,sys; d=pickle.load(open(sys.argv[1],'rb'))
d=d if isinstance(d,dict) else {}
print(sum(len(t) for t in d.get('device_traces',[])))" "$FILE" 2>/dev/null || echo "?")
fi
CPU=$(grep -m1 -E '^(model name|Model name|cpu model|Hardware)' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
if [[ -z "$CPU" ]] && command -v lscpu >/dev/null; then
    CPU=$(lscpu | awk -F: '/^Model name/ { sub(/^ +/, "", $2); print $2; exit }')
fi
VERSION=$("$BIN" --version 2>/dev/null | head -n 1 || true)
if GITREV=$(git rev-parse --short HEAD 2>/dev/null); then
    git diff --quiet HEAD -- 2>/dev/null || GITREV="$GITREV+dirty"
else
    GITREV="no commit yet"
fi

{
    echo "## leakscope benchmark"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- machine: $(uname -m), ${CPU:-unknown CPU}, $(nproc) cores"
    awk -v f="$FILE" -v b="$BYTES" -v e="$EVENTS" 'BEGIN {
        printf "- file: %s, %.1f MB (%.1f MiB), %s trace events\n", f, b / 1e6, b / 1048576, e }'
    echo "- binary: ${VERSION:-$BIN} (git $GITREV)"
    echo "- timing: \`$TIME_BIN -f '%e %M'\`, page cache warm; wall = best of the runs, RSS = that run's peak;" \
        "MB = 10^6 bytes, MiB = 2^20 bytes"
    echo
    echo "| command | runs | wall s | MB/s | peak RSS MiB | RSS / file | speed-up vs CPython |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for i in "${!LABELS[@]}"; do
        if [[ "${WALLS[$i]}" == failed ]]; then
            echo "| \`${LABELS[$i]}\` | - | failed | | | | |"
            continue
        fi
        awk -v l="${LABELS[$i]}" -v n="${NRUNS[$i]}" -v w="${WALLS[$i]}" -v r="${RSSES[$i]}" \
            -v b="$BYTES" -v p="$PY_WALL" 'BEGIN {
            # GNU time reports 0.01 s steps: show a bound below that
            ws = (w > 0) ? sprintf("%.2f", w) : "<0.01"
            we = (w > 0) ? w : 0.01
            lt = (w > 0) ? "" : ">"
            mbs = lt sprintf("%.0f", b / 1e6 / we)
            su = (p == "") ? "-" : lt sprintf("%.1f×", p / we)
            printf "| `%s` | %d | %s | %s | %.0f | %.2f | %s |\n", l, n, ws, mbs, r / 1024, r * 1024 / b, su
        }'
    done
} >"$TMP/results.md"

cp "$TMP/results.md" "$OUTDIR/results.md"
echo
cat "$OUTDIR/results.md"
log ""
log "written to $OUTDIR/results.md"
