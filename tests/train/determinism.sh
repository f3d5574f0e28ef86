#!/usr/bin/env bash
# Same seed, same mesh ($DET_NP ranks, full_shard): two training runs on a real corpus, with
# evaluation every 5 steps, gradient accumulation and FSDP, are bitwise identical:
#  * loss, grad_norm and lr at every step, val_loss at every evaluation step (5, 10, 15 --
#    and only there, in both runs);
#  * the final checkpoints: every parameter and both AdamW moments (h5py, bit for bit).
# Evaluation is deterministic too: `meshtrain eval` of the same checkpoint twice gives the
# bitwise same loss, equal to the val_loss the run logged at that step (doc/batch.md promises
# bitwise on the training mesh), and run b's checkpoint evaluates to the same loss.
set -euo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
np=${DET_NP:?}
py=${REFERENCE_PYTHON:-/usr/bin/python3}
src=$MESHTRAIN_SOURCE_DIR
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP"
"$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes --output data > /dev/null
for run in a b; do
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$src/inputs/tiny-gpt2.ini" --data.dir=data \
    --train.steps=15 --train.eval_every=5 --parallel.strategy=full_shard --checkpoint.save_final=true \
    --output.dir="$run" > "$run.log" 2>&1 || { cat "$run.log"; echo "FAIL: training run $run"; exit 1; }
done
label="determinism np$np"
python3 "$src/tests/parallel/compare_metrics.py" a/metrics.jsonl b/metrics.jsonl --exact --keys loss grad_norm lr \
  --label "$label"
python3 "$src/tests/parallel/compare_metrics.py" a/metrics.jsonl b/metrics.jsonl --exact --sparse --keys val_loss \
  --label "$label"
"$py" - a/metrics.jsonl <<'PY'
import json, sys
steps = [r["step"] for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r]
assert steps == [5, 10, 15], f"val_loss logged at steps {steps}, expected 5, 10, 15 (train.eval_every=5)"
PY
"$py" "$src/tests/checkpoint/check_h5.py" gpt2 a/checkpoints/step_00000015.h5 b/checkpoints/step_00000015.h5 \
  --exact --step 15 || { echo "FAIL: the final checkpoints of two identical runs differ"; exit 1; }

# eval_loss RUN N: the loss (repr of the JSON number) of `meshtrain eval` of RUN's final checkpoint.
eval_loss() {
  # shellcheck disable=SC2086
  timeout $((60 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" eval "$1/config.ini" --json > "eval_$1_$2.log" 2>&1 ||
    { cat "eval_$1_$2.log" >&2; echo "FAIL: eval of run $1" >&2; return 1; }
  grep '^{' "eval_$1_$2.log" | "$py" -c 'import json, sys; print(repr(json.load(sys.stdin)["loss"]))'
}
e1=$(eval_loss a 1)
e2=$(eval_loss a 2)
eb=$(eval_loss b 1)
logged=$("$py" -c 'import json, sys; print(repr([r for r in map(json.loads, open(sys.argv[1])) if r["step"] == 15][0]["val_loss"]))' a/metrics.jsonl)
echo "$label: eval of a's final checkpoint: $e1, again: $e2; of b's: $eb; logged val_loss at step 15: $logged"
[[ $e1 == "$e2" ]] || { echo "FAIL: two evaluations of the same checkpoint differ"; exit 1; }
[[ $e1 == "$eb" ]] || { echo "FAIL: the two runs' final checkpoints evaluate differently"; exit 1; }
[[ $e1 == "$logged" ]] || { echo "FAIL: eval on the training mesh is not bitwise the logged val_loss"; exit 1; }
echo "$label: all checks passed"
