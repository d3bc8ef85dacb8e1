#!/usr/bin/env bash
# Fills fuzz/corpus/TARGET/ with seeds: the tiny encodings and the scenario snapshots
# shipped in fixtures/, and (when LEAKSCOPE_CORPUS is set) real snapshots up to 128 KB,
# each also converted to JSON and to the MessagePack cache for those two targets, and
# compressed with gzip and zstd for the compressed-input target.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN=target/release/leakscope
OUT=fuzz/corpus
mkdir -p "$OUT"/{pickle,json,msgpack,analysis,compressed}
seeds=(fixtures/encodings/*.pickle fixtures/scenarios/*.pickle)
if [[ -n "${LEAKSCOPE_CORPUS:-}" ]]; then
  while IFS= read -r f; do seeds+=("$f"); done \
    < <(find "$LEAKSCOPE_CORPUS" -type f -size -128k \( -name '*.pickle' -o -name '*.pkl' \))
fi
cp fixtures/encodings/tiny.json "$OUT/json/"
for f in "${seeds[@]}"; do
  name=$(basename "$f")
  cp "$f" "$OUT/pickle/$name"
  cp "$f" "$OUT/analysis/$name"
  cp "$f" "$OUT/compressed/$name"
  gzip -6 -c "$f" >"$OUT/compressed/$name.gz"
  zstd -q -3 -c "$f" >"$OUT/compressed/$name.zst"
  "$BIN" convert "$f" "$OUT/json/$name.json" 2>/dev/null || true
  "$BIN" convert "$f" "$OUT/msgpack/$name.msgpack" 2>/dev/null || true
done
for t in pickle json msgpack analysis compressed; do
  echo "$t: $(ls "$OUT/$t" | wc -l) seeds"
done
