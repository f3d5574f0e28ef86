#!/usr/bin/env bash
# Impossible tensor-parallel layouts are one clear message and exit status 2 (issue 5):
# heads not divisible by tp, vocabulary not divisible without padding, tp larger than the
# node, and the fix each message names.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
fail=0
expect_error() {
  local name=$1 pattern=$2; shift 2
  # shellcheck disable=SC2086
  $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini" --output.dir="$TEST_TMP/$name" \
    "$@" > "$TEST_TMP/$name.out" 2> "$TEST_TMP/$name.err"
  local rc=$?
  local msgs
  msgs=$(grep -c "meshtrain train: error:" "$TEST_TMP/$name.err")
  if [[ $rc -eq 0 ]] || ! grep -q -- "$pattern" "$TEST_TMP/$name.err" || [[ $msgs -ne 1 ]] ||
     grep -qE "terminate called|Backtrace|Segmentation" "$TEST_TMP/$name.err"; then
    echo "FAIL $name: rc=$rc, $msgs error lines, expected /$pattern/:"; cat "$TEST_TMP/$name.err"; fail=1
  else
    echo "ok   $name: $(grep 'error:' "$TEST_TMP/$name.err")"
  fi
}
expect_error heads "model.n_heads=3 is not divisible by parallel.tp=2" --model.n_heads=3 --model.n_kv_heads=1 \
  --model.d_model=48 --parallel.tp=2
expect_error vocab "set model.vocab_pad_multiple" --model.vocab_size=257 --parallel.tp=2
expect_error_plan() {
  local name=$1 pattern=$2; shift 2
  "$MESHTRAIN_BIN" plan "$@" > "$TEST_TMP/$name.out" 2> "$TEST_TMP/$name.err"
  local rc=$?
  if [[ $rc -eq 0 ]] || ! grep -q -- "$pattern" "$TEST_TMP/$name.err"; then
    echo "FAIL $name: rc=$rc, expected /$pattern/:"; cat "$TEST_TMP/$name.err"; fail=1
  else
    echo "ok   $name: $(grep 'error:' "$TEST_TMP/$name.err")"
  fi
}
# A node size is known when planning for a cluster (or from the job's topology).
expect_error_plan node "parallel.tp=8 is larger than a node (4 ranks per node)" --plan.world_size=16 \
  --plan.gpus_per_node=4 --parallel.tp=8
expect_error batch "train.global_batch=6 is not a multiple" --train.global_batch=6 --train.micro_batch=2
exit $fail
