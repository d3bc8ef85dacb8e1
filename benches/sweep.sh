#!/usr/bin/env bash
# The verdict engine on a large seeded sample of the scenario generator's parameter space
# (fixtures/gen/sweep.py), every case judged against the generator's truth by the same test
# CI runs on a smaller sample (tests/integration/sweep.rs). Writes the per-parameter table
# and the wrong cases to $OUT (default target/sweep-table.md); docs/verdicts.md holds the
# last run's table.
#
#   benches/sweep.sh [CASES] [SEED]      # default 3000 cases, seed 2026
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-3000}
SEED=${2:-2026}
OUT=${OUT:-target/sweep-table.md}
LEAKSCOPE_SWEEP_SAMPLE=$N LEAKSCOPE_SWEEP_SEED=$SEED LEAKSCOPE_SWEEP_TABLE=$OUT \
    cargo test --test integration sweep -- --nocapture
echo "table: $OUT"
