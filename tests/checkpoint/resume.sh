#!/usr/bin/env bash
# Resume through the CLI, tiny-$RESUME_FAMILY, fp32, 20 steps (cosine schedule):
#   bitwise  (RESUME_MODE=bitwise): a straight 20-step run vs the same run saving at step 10
#            (identical losses: saving does not perturb training) and vs a new mpirun that
#            resumes from that step-10 checkpoint and runs steps 11..20 on the same mesh:
#            loss, gradient norm and learning rate bitwise equal at every step, and the
#            final checkpoints (every parameter, both AdamW moments; read with h5py) of
#            all three runs bitwise equal.
#   reshard  (RESUME_MODE=reshard): save at 4 ranks (dp_shard=2 x tp=2, full_shard), resume
#            at 1 rank, 2 ranks (tp=2) and 4 ranks (dp_shard=4): steps 11..20 match the
#            straight 4-rank run within 1e-5 relative (reduction order differs by mesh).
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
family=${RESUME_FAMILY:?}
mode=${RESUME_MODE:?}
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
compare="$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# train NAME NP ARGS...: a 20-step run into NAME/ (its log in NAME.log).
train() {
  local name=$1 np=$2
  shift 2
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  if ! timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-$family.ini" \
      --train.steps=20 --train.eval_every=0 --data.dir=random --output.dir="$name" "$@" >"$name.log" 2>&1; then
    cat "$name.log"
    fail "$name: training exited non-zero"
    return 1
  fi
}

if [[ $mode == bitwise ]]; then
  mesh=(--parallel.dp_shard=2 --parallel.strategy=full_shard)
  train straight 2 "${mesh[@]}" --checkpoint.save_final=true
  train saving 2 "${mesh[@]}" --checkpoint.every=10
  [[ -f saving/checkpoints/step_00000010.h5 ]] || fail "no step-10 checkpoint"
  grep -q '"ckpt_save_s"' saving/metrics.jsonl || fail "metrics.jsonl lacks ckpt_save_s"
  grep -q 'checkpoint saving/checkpoints/step_00000010.h5: .* GB/s' saving.log || fail "the log lacks the save throughput"
  train resumed 2 "${mesh[@]}" --checkpoint.resume=saving/checkpoints/step_00000010.h5
  grep -q 'resumed from saving/checkpoints/step_00000010.h5: step 10' resumed.log || fail "the resumed run did not say so"
  [[ $(head -n1 resumed/metrics.jsonl | python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])') == 11 ]] ||
    fail "the resumed run did not start at step 11"
  python3 "$compare" straight/metrics.jsonl saving/metrics.jsonl --exact --keys loss grad_norm lr \
    --label "$family: saving vs straight" || fail "saving changed the training"
  python3 "$compare" straight/metrics.jsonl resumed/metrics.jsonl --exact --steps 11,20 --keys loss grad_norm lr \
    --label "$family: resumed vs straight" || fail "the resumed run differs from the straight run"
  for run in saving resumed; do
    echo "$family: final checkpoint of $run vs straight (h5py)"
    "${REFERENCE_PYTHON:-/usr/bin/python3}" "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/check_h5.py" "$family" \
      straight/checkpoints/step_00000020.h5 "$run/checkpoints/step_00000020.h5" --exact --step 20 --mesh 1x2x1 ||
      fail "the final parameters or optimizer moments of $run differ from the straight run's"
  done
else
  train straight4 4 --parallel.dp_shard=2 --parallel.tp=2 --parallel.strategy=full_shard --checkpoint.every=10
  ckpt=straight4/checkpoints/step_00000010.h5
  [[ -f $ckpt ]] || fail "no step-10 checkpoint"
  for dest in "np1|1|--parallel.strategy=full_shard" "tp2_np2|2|--parallel.tp=2 --parallel.strategy=full_shard" \
              "dp_shard4_np4|4|--parallel.dp_shard=4 --parallel.strategy=full_shard"; do
    IFS='|' read -r name np args <<<"$dest"
    # shellcheck disable=SC2086  # args is a word list
    train "$name" "$np" $args --checkpoint.resume="$ckpt" || continue
    python3 "$compare" straight4/metrics.jsonl "$name/metrics.jsonl" --rtol 1e-5 --steps 11,20 --keys loss grad_norm \
      --label "$family: resumed at $name" || fail "resumed at $name differs"
  done
fi

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "resume $mode $family: all checks passed"
