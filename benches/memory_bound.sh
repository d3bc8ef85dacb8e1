#!/usr/bin/env bash
# The loader's memory bound, measured: peak RSS and time of `leakscope summary` on
#   1. hostile-but-valid inputs (discarded containers, a compressed bomb, a long string,
#      live data past the bound), each next to the bound 4 x input + 64 MiB;
#   2. every real snapshot (LEAKSCOPE_CORPUS and its real-more sibling) and the benchmark
#      file, with the binary before a change (BEFORE_BIN) and after it interleaved, best of
#      BENCH_RUNS each.
#
#   BEFORE_BIN=/path/to/old/leakscope benches/memory_bound.sh
#
# Build BEFORE_BIN from an earlier commit with, for example,
#   git worktree add /tmp/before REV && (cd /tmp/before && cargo build --release)
# Without BEFORE_BIN only part 1 and the current binary's figures are printed.
#
# Environment: BENCH_RUNS (default 3), LEAKSCOPE_CORPUS (default ../shared/fixtures/real),
# BENCH_BIG (the benchmark file; default target/bench/big.pickle, made by benches/run.sh;
# skipped when absent), TIME_BIN (GNU time, default /usr/bin/time).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RUNS=${BENCH_RUNS:-3}
TIME_BIN=${TIME_BIN:-/usr/bin/time}
CORPUS=${LEAKSCOPE_CORPUS:-$ROOT/../shared/fixtures/real}
BIG=${BENCH_BIG:-target/bench/big.pickle}
OUT=target/bench/memory
mkdir -p "$OUT"
cargo build --release -q
AFTER=target/release/leakscope

# "seconds KiB exit" of one run.
measure() {
    local f
    f=$(mktemp)
    "$TIME_BIN" -f '%e %M %x' -o "$f" "$@" >/dev/null 2>>"$OUT/stderr.log" || true
    tail -1 "$f"
    rm -f "$f"
}

# Best (lowest wall time) of RUNS runs: "seconds KiB exit".
best() {
    local best_line="" t
    for _ in $(seq "$RUNS"); do
        local line
        line=$(measure "$@")
        t=${line%% *}
        if [[ -z "$best_line" ]] || awk "BEGIN{exit !($t < ${best_line%% *})}"; then
            best_line=$line
        fi
    done
    echo "$best_line"
}

echo "== 1. hostile inputs (written to $OUT)"
python3 - "$OUT" <<'EOF'
import struct, sys
d = sys.argv[1]
MiB = 1 << 20
tail = b'}\x8c\x08segments]s.'
def w(name, data):
    with open(f"{d}/{name}", "wb") as f:
        f.write(data)
w("lists64.pickle", b"\x80\x04" + b"]0" * (32 * MiB) + tail)
w("dicts64.pickle", b"\x80\x04" + b"}0" * (32 * MiB) + tail)
w("nested64.pickle", b"\x80\x04" + b"]]a0" * (16 * MiB) + tail)
w("lists256.pickle", b"\x80\x04" + b"]0" * (128 * MiB) + tail)
w("nones64.pickle", b"\x80\x04](" + b"N" * (64 * MiB) + b"e" + tail)
n = 512 * MiB
with open(f"{d}/string512.pickle", "wb") as f:
    f.write(b"\x80\x04}(\x8c\x08segments]\x8c\x04note\x8d" + struct.pack("<Q", n))
    chunk = b"a" * MiB
    for _ in range(512):
        f.write(chunk)
    f.write(b"u.")
EOF
zstd -q -19 -f "$OUT/lists256.pickle" -o "$OUT/lists256.pickle.zst"
# 3 GiB of discarded lists, compressed as it is written.
python3 -c "
import sys
o = sys.stdout.buffer
o.write(b'\x80\x04')
chunk = b']0' * (8 << 20)
for _ in range(3 * 64):
    o.write(chunk)
o.write(b'}\x8c\x08segments]s.')
" | zstd -q -3 -o "$OUT/bomb3g.pickle.zst" -f

echo
echo "| input | size | decompressed | peak RSS | bound 4x + 64 MiB | exit | time |"
echo "|---|---:|---:|---:|---:|---:|---:|"
row() { # name decompressed-bytes [extra args]
    local name=$1 dec=$2
    shift 2
    local size r
    size=$(stat -c %s "$OUT/$name")
    r=$(measure "$AFTER" summary "$@" "$OUT/$name")
    read -r t kib code <<<"$r"
    local bound=$(( (4 * dec + 64 * 1048576) / 1048576 ))
    printf '| %s %s | %s | %s | %s MiB | %s MiB | %s | %s s |\n' "$name" "$*" "$size" "$dec" \
        "$((kib / 1024))" "$bound" "$code" "$t"
}
row lists64.pickle "$(stat -c %s "$OUT/lists64.pickle")"
row dicts64.pickle "$(stat -c %s "$OUT/dicts64.pickle")"
row nested64.pickle "$(stat -c %s "$OUT/nested64.pickle")"
row nones64.pickle "$(stat -c %s "$OUT/nones64.pickle")"
row lists256.pickle "$(stat -c %s "$OUT/lists256.pickle")"
row lists256.pickle.zst "$(stat -c %s "$OUT/lists256.pickle")"
row bomb3g.pickle.zst 100000000 --max-decompressed-bytes 100000000
s=$(stat -c %s "$OUT/string512.pickle")
r=$(measure "$AFTER" summary "$OUT/string512.pickle")
read -r t kib code <<<"$r"
printf '| string512.pickle (a 512 MiB string) | %s | %s | %s MiB | 1.25x + 64 MiB = %s MiB | %s | %s s |\n' \
    "$s" "$s" "$((kib / 1024))" "$(( (5 * s / 4 + 64 * 1048576) / 1048576 ))" "$code" "$t"
rm -f "$OUT"/*.pickle

echo
echo "== 2. real snapshots and the benchmark file: summary, before and after (best of $RUNS)"
files=()
for f in "$CORPUS"/*/* "$CORPUS"/../real-more/*; do
    case "$f" in *.md | *SHA256SUMS) continue ;; esac
    [[ -f "$f" ]] && files+=("$f")
done
[[ -f "$BIG" ]] && files+=("$BIG")
if [[ -n "${BEFORE_BIN:-}" ]]; then
    echo "| file | size | before RSS | after RSS | before s | after s |"
    echo "|---|---:|---:|---:|---:|---:|"
else
    echo "| file | size | RSS | s |"
    echo "|---|---:|---:|---:|"
fi
for f in "${files[@]}"; do
    size=$(stat -c %s "$f")
    if [[ -n "${BEFORE_BIN:-}" ]]; then
        # Interleaved: each round runs both, so both see the same machine.
        bb="" ba=""
        for _ in $(seq "$RUNS"); do
            a=$(measure "$BEFORE_BIN" summary "$f")
            b=$(measure "$AFTER" summary "$f")
            if [[ -z "$bb" ]] || awk "BEGIN{exit !(${a%% *} < ${bb%% *})}"; then bb=$a; fi
            if [[ -z "$ba" ]] || awk "BEGIN{exit !(${b%% *} < ${ba%% *})}"; then ba=$b; fi
        done
        read -r tb kb _ <<<"$bb"
        read -r ta ka _ <<<"$ba"
        printf '| %s | %s | %s KiB | %s KiB | %s | %s |\n' "$(basename "$f" | cut -c1-60)" "$size" "$kb" "$ka" "$tb" "$ta"
    else
        r=$(best "$AFTER" summary "$f")
        read -r t k _ <<<"$r"
        printf '| %s | %s | %s KiB | %s |\n' "$(basename "$f" | cut -c1-60)" "$size" "$k" "$t"
    fi
done
