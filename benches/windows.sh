#!/usr/bin/env bash
# The main job on a trace of many windows: a generated single-device snapshot of about
# 400 MB whose micro-batches (over 10,000, marked by `record_function` annotations) are the
# windows, timed by benches/run.sh next to `summary` and CPython's pickle.load.
#
#   benches/windows.sh          (BENCH_RUNS etc. as for run.sh)
#
# The file (target/bench/windows.pickle) is generated once with benches/gen_big_snapshot.py
# (--devices 1 --stacks 200 --seed 2 --size-mb 400) and reused while its meta file says so.
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=target/bench/windows.pickle
SIZE_MB=${BENCH_WINDOWS_SIZE_MB:-400}
mkdir -p target/bench
if ! grep -qs "\"size_mb_requested\": $SIZE_MB" "$FILE.meta.json"; then
    echo "generating $FILE ($SIZE_MB MB, one device)..." >&2
    python3 benches/gen_big_snapshot.py --size-mb "$SIZE_MB" --devices 1 --stacks 200 --seed 2 -o "$FILE" >&2
fi
export BENCH_CMDS=${BENCH_CMDS:-"summary;leaks;leaks --windows annotation:^micro_batch\\d+\$;report -o target/bench/windows-report.html;oom;compare {FILE} {FILE};export --perfetto target/bench/windows.perfetto-trace"}
exec benches/run.sh "$FILE"
