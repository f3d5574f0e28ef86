#!/usr/bin/env bash
# bf16 mixed precision (bf16 compute and all-gathers, fp32 master and moments), with fp32
# and bf16 gradient reduction, tracks the fp32 run: bf16 rounding (8 mantissa bits) gives
# per-step loss differences of ~1e-3 relative, so 2e-2 is the tolerance; and it learns.
set -euo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
data="$TEST_TMP/data"
"$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes --output "$data" > /dev/null
run() {
  local name=$1; shift
  # shellcheck disable=SC2086
  $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini" --data.dir="$data" \
    --train.steps=30 --train.eval_every=0 --parallel.strategy=full_shard --checkpoint.save_final=false \
    --output.dir="$TEST_TMP/$name" "$@" > "$TEST_TMP/$name.log" 2>&1 || { cat "$TEST_TMP/$name.log"; exit 1; }
}
run fp32
run bf16 --train.precision=bf16
run bf16_reduce --train.precision=bf16 --parallel.reduce_dtype=bf16
for b in bf16 bf16_reduce; do
  python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" "$TEST_TMP/fp32/metrics.jsonl" \
    "$TEST_TMP/$b/metrics.jsonl" --rtol 2e-2 --keys loss --label "$b vs fp32"
done
python3 - "$TEST_TMP/bf16/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first, last = rows[0]["loss"], rows[-1]["loss"]
print(f"bf16 loss {first:.4f} -> {last:.4f}")
assert last < first - 0.5, "bf16 training did not learn"
PY
