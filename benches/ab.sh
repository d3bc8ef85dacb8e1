#!/usr/bin/env bash
# Times two leakscope binaries on one file in the same run, alternating base and new for
# every repetition (so a slower or busier minute hits both), and prints a Markdown table:
# best and median wall seconds, peak RSS, and new/base of the medians.
#
#   benches/ab.sh BASE_BIN NEW_BIN FILE [CMD ...]
#   AB_RUNS=7 benches/ab.sh /tmp/base/leakscope target/release/leakscope big.pickle summary leaks
#
# CMD defaults to `summary` and `leaks`; each is split on spaces, FILE appended last.
set -euo pipefail
if [[ $# -lt 3 ]]; then
    sed -n 2,9p "$0" >&2
    exit 2
fi
BASE=$1 NEW=$2 FILE=$3
shift 3
CMDS=("$@")
[[ ${#CMDS[@]} -eq 0 ]] && CMDS=(summary leaks)
RUNS=${AB_RUNS:-5}
TIME_BIN=${TIME_BIN:-/usr/bin/time}
cat "$FILE" > /dev/null   # warm the page cache

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
best() { sort -g | head -1; }

one() { # BIN CMD -> "seconds rss_kib"
    local out
    # shellcheck disable=SC2086
    out=$("$TIME_BIN" -f '%e %M' "$1" $2 "$FILE" 2>&1 >/dev/null | tail -1)
    echo "$out"
}

echo "| command | base best / median s | new best / median s | base / new peak RSS MiB | new / base (medians) |"
echo "|---|---|---|---|---|"
for cmd in "${CMDS[@]}"; do
    b_t=() n_t=() b_m=0 n_m=0
    for ((i = 0; i < RUNS; i++)); do
        read -r t m < <(one "$BASE" "$cmd")
        b_t+=("$t"); (( m > b_m )) && b_m=$m
        read -r t m < <(one "$NEW" "$cmd")
        n_t+=("$t"); (( m > n_m )) && n_m=$m
        echo "  $cmd run $((i + 1)): base ${b_t[-1]} s, new ${n_t[-1]} s" >&2
    done
    bb=$(printf '%s\n' "${b_t[@]}" | best) bmed=$(printf '%s\n' "${b_t[@]}" | median)
    nb=$(printf '%s\n' "${n_t[@]}" | best) nmed=$(printf '%s\n' "${n_t[@]}" | median)
    ratio=$(awk -v a="$nmed" -v b="$bmed" 'BEGIN {printf "%.3f", a / b}')
    echo "| \`leakscope $cmd F\` | $bb / $bmed | $nb / $nmed | $((b_m / 1024)) / $((n_m / 1024)) | ${ratio}× |"
done
