#!/usr/bin/env bash
# Non-finite steps (issue 7, "Must show" 3), with the debug option train.inject_nan_steps
# that poisons gradients:
#  1. NaN gradients on rank 1 only at steps 4 and 7: every rank detects them (the gradient
#     norm is global) and skips the same steps -- each rank warns "step N: non-finite ...
#     (k of train.max_skipped_steps=5)" with the same k; metrics.jsonl counts the skips;
#     the optimizer state is untouched (checkpoint attribute optimizer_updates = steps -
#     skipped; the checkpoints just before and after a skipped step hold bitwise the same
#     parameters and AdamW moments, read with h5py, while an applied step changes all
#     three); training continues to the end with a finite, falling loss.
#  2. NaN on all ranks at steps 3, 4 and 5 with train.max_skipped_steps=2: the third skip
#     aborts cleanly -- exit status 3 and one error message naming the limit.
# In both, every checkpoint written (one per step) holds only finite values (h5py).
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

# Real text, so that a loss that keeps falling shows training going on after the skips.
"$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes --output data >/dev/null || { fail "prepare failed"; finish; }
common=(train "$tiny" --data.dir=data --checkpoint.every=1 --checkpoint.keep=100)

echo "--- 1. NaN gradients on rank 1 at steps 4 and 7, max_skipped_steps=5"
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${common[@]}" --train.steps=12 --train.inject_nan_steps=4,7 \
  --train.inject_nan_rank=1 --train.max_skipped_steps=5 --output.dir=skip >skip.log 2>&1
status=$?
[[ $status -eq 0 ]] || { tail -30 skip.log; fail "exit status $status, expected 0 (two skips are within the limit)"; }
grep "non-finite" skip.log
for r in 0 1; do
  for k in "4:1" "7:2"; do
    step=${k%%:*} n=${k##*:}
    grep -q "^\[rank $r\] warning: step $step: non-finite .* step skipped, optimizer state untouched ($n of train.max_skipped_steps=5)" skip.log ||
      fail "rank $r did not report skipping step $step as skip $n"
  done
done
[[ $(grep -c "non-finite" skip.log) -eq 4 ]] || fail "expected 4 skip warnings (2 steps x 2 ranks)"
"$py" - skip/metrics.jsonl skip/summary.json <<'EOF' || fail "metrics.jsonl / summary.json do not show the skips"
import json, math, sys
rows = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
summary = json.load(open(sys.argv[2]))
expect = {s: (0 if s < 4 else 1 if s < 7 else 2) for s in range(1, 13)}
got = {s: rows[s]["skipped_steps"] for s in expect}
print("skipped_steps by step:", got)
print("loss by step:", {s: rows[s]["loss"] for s in rows})
ok = got == expect
# A skipped step reports its non-finite gradient norm as null (JSON has no NaN).
ok &= rows[4]["grad_norm"] is None and rows[7]["grad_norm"] is None
ok &= all(rows[s]["loss"] is not None and math.isfinite(rows[s]["loss"]) for s in rows if s not in (4, 7))
ok &= rows[12]["loss"] < rows[1]["loss"]
print("summary:", {k: summary[k] for k in ("skipped_steps", "optimizer_updates", "final_loss")})
ok &= summary["skipped_steps"] == 2 and summary["optimizer_updates"] == 10
sys.exit(0 if ok else 1)
EOF
all_finite skip/checkpoints/step_*.h5 >finite1.txt || { cat finite1.txt; fail "a checkpoint of run 1 holds non-finite values"; }
sed -n '4p;7p;12p' finite1.txt
for k in "4:3:1" "7:5:2" "12:10:2"; do
  IFS=: read -r step updates skipped <<<"$k"
  f=$(printf 'skip/checkpoints/step_%08d.h5' "$step")
  [[ $(h5_attr "$f" optimizer_updates) == "$updates" && $(h5_attr "$f" skipped_steps) == "$skipped" ]] ||
    fail "$f: optimizer_updates/skipped_steps are not $updates/$skipped"
done

# The state around each skipped step: step_{N-1} and step_N (N skipped) bitwise equal in
# /model, /optim/exp_avg and /optim/exp_avg_sq; step_N and step_{N+1} (applied) differ in
# every one of the three groups (so that the comparison above can fail).
for step in 4 7; do
  before=$(printf 'skip/checkpoints/step_%08d.h5' $((step - 1)))
  after=$(printf 'skip/checkpoints/step_%08d.h5' "$step")
  next=$(printf 'skip/checkpoints/step_%08d.h5' $((step + 1)))
  echo "skipped step $step: $before vs $after"
  "$py" "$MESHTRAIN_SOURCE_DIR/tests/checkpoint/check_h5.py" gpt2 "$before" "$after" --exact ||
    fail "the skipped step $step changed the parameters or the optimizer moments"
  "$py" - "$after" "$next" <<'EOF' || fail "the applied step $((step + 1)) did not change parameters and both moments"
import sys
import h5py, numpy as np
a, b = (h5py.File(f, "r") for f in sys.argv[1:3])
for group in ("model", "optim/exp_avg", "optim/exp_avg_sq"):
    changed = sum(not np.array_equal(a[group][n][...], b[group][n][...]) for n in a[group])
    print(f"  applied step: {changed} of {len(a[group])} tensors of /{group} changed")
    assert changed > 0, f"/{group} unchanged by an applied step"
EOF
done

echo "--- 2. NaN gradients on all ranks at steps 3, 4, 5, max_skipped_steps=2"
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${common[@]}" --train.steps=12 --train.inject_nan_steps=3,4,5 \
  --train.inject_nan_rank=-1 --train.max_skipped_steps=2 --output.dir=abort >abort.log 2>&1
status=$?
echo "exit status $status"
grep "error:" abort.log
[[ $status -eq 3 ]] || { tail -30 abort.log; fail "exit status $status, expected 3 (kExitAbort)"; }
grep -q "error: 3 steps had a non-finite loss or gradient norm, more than train.max_skipped_steps=2: stopping" abort.log ||
  fail "no abort message naming train.max_skipped_steps"
[[ $(grep -c "error:" abort.log) -eq 1 ]] || fail "expected one error message (rank 0)"
[[ $(last_step abort/metrics.jsonl) -le 4 ]] || fail "training continued past the aborting step"
all_finite abort/checkpoints/step_*.h5 >finite2.txt || { cat finite2.txt; fail "a checkpoint of run 2 holds non-finite values"; }
cat finite2.txt
ls abort/checkpoints/step_00000005.h5 2>/dev/null && fail "the aborting step was checkpointed"
finish "NaN steps skipped alike on every rank, abort beyond the limit with status 3, all checkpoints finite"
