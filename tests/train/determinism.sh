#!/usr/bin/env bash
# Same seed, same rank count: two runs produce bitwise identical losses (metrics.jsonl),
# on a real corpus with evaluation, gradient accumulation and FSDP (full_shard at 2 ranks).
set -euo pipefail
np=${DET_NP:?}
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
data="$TEST_TMP/data"
"$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes --output "$data" > /dev/null
for run in a b; do
  # shellcheck disable=SC2086
  $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini" --data.dir="$data" \
    --train.steps=15 --train.eval_every=5 --parallel.strategy=full_shard --checkpoint.save_final=false \
    --output.dir="$TEST_TMP/$run" > "$TEST_TMP/$run.log" 2>&1 || { cat "$TEST_TMP/$run.log"; exit 1; }
done
python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" "$TEST_TMP/a/metrics.jsonl" "$TEST_TMP/b/metrics.jsonl" \
  --exact --keys loss grad_norm val_loss --steps 5,15 --label "determinism np$np" || true
python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" "$TEST_TMP/a/metrics.jsonl" "$TEST_TMP/b/metrics.jsonl" \
  --exact --keys loss grad_norm --label "determinism np$np"
