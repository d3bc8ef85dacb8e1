#!/usr/bin/env bash
# The series acceptance (issue 35): N state-only snapshots of about 50 MB each, analysed as
# a series (`leakscope leaks FILE...`) next to loading each of them (`leakscope summary` of
# each file, one after another), in the same run, best of BENCH_RUNS.
#
#   benches/series.sh            (BENCH_SERIES_FILES=100, BENCH_SERIES_BLOCKS=370000, BENCH_RUNS=3)
#
# The files (target/bench/series/step0001.pickle ...) are generated once with
# benches/gen_series.py and reused while target/bench/series/meta says the same sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${BENCH_SERIES_FILES:-100}
BLOCKS=${BENCH_SERIES_BLOCKS:-370000}
RUNS=${BENCH_RUNS:-3}
DIR=target/bench/series
META="files=$N blocks=$BLOCKS seed=1"
if [[ "$(cat "$DIR/meta" 2>/dev/null)" != "$META" ]]; then
    rm -rf "$DIR"
    echo "generating $N files into $DIR ..." >&2
    python3 benches/gen_series.py -o "$DIR" --files "$N" --blocks "$BLOCKS" --seed 1
    echo "$META" > "$DIR/meta"
fi
cargo build --release -q
BIN=${LEAKSCOPE_BIN:-target/release/leakscope}
TIME_BIN=${TIME_BIN:-/usr/bin/time}
cat "$DIR"/*.pickle > /dev/null  # page cache warm
total=$(du -cb "$DIR"/*.pickle | tail -1 | cut -f1)

# best wall time (s) and that run's peak RSS (KiB) of "$@", over RUNS runs
best() {
    local best_t="" best_m=""
    for _ in $(seq "$RUNS"); do
        local out
        out=$("$TIME_BIN" -f "%e %M" "$@" 2>&1 >/dev/null | tail -1)
        local t=${out% *} m=${out#* }
        if [[ -z "$best_t" ]] || awk "BEGIN{exit !($t < $best_t)}"; then best_t=$t; best_m=$m; fi
    done
    echo "$best_t $best_m"
}

each() { for f in "$DIR"/*.pickle; do "$BIN" summary "$f" > /dev/null; done; }
export -f each
export BIN DIR
read -r t_each m_each < <(best bash -c each)
read -r t_series m_series < <(best "$BIN" leaks "$DIR"/*.pickle)
read -r t_one m_one < <(best env RAYON_NUM_THREADS=1 "$BIN" leaks "$DIR"/*.pickle)
ratio=$(awk "BEGIN{printf \"%.2f\", $t_series / $t_each}")
ratio_one=$(awk "BEGIN{printf \"%.2f\", $t_one / $t_each}")
{
    echo "| $N files, $(awk "BEGIN{printf \"%.0f\", $total / 1e6}") MB | wall (s) | peak RSS (MiB) | vs summary of each |"
    echo "|---|---:|---:|---:|"
    echo "| \`summary\` of each file, one after another | $t_each | $((m_each / 1024)) | 1.00 |"
    echo "| \`leaks FILE...\` (the series) | $t_series | $((m_series / 1024)) | $ratio |"
    echo "| \`leaks FILE...\`, one thread (RAYON_NUM_THREADS=1) | $t_one | $((m_one / 1024)) | $ratio_one |"
} | tee target/bench/series-results.md
