#!/usr/bin/env bash
# `meshtrain eval --batches 0` evaluates every non-overlapping window of the split exactly
# once, whatever the mesh (issue 16, claim 5): on 1, 2 and 3 ranks the window count is
# (validation tokens - 1) // seq_len, computed here from meta.json, and the losses agree
# (1e-6 relative: the same windows, summed in another order). micro_batch 7 divides
# neither the window count nor 7 x ranks, so the last micro-batch is always partial.
# Also: a run's config.ini with a tensor-parallel mesh (tp=2 on 2 ranks) evaluates on 1
# and 3 ranks (the saved mesh does not fit, plain FSDP is used, with a message). --batches
# and train.eval_batches (the run's val_loss, eval without --batches) past the split read
# the whole split once, with a warning.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

# One fortunes file (~240 KB): ~190 validation windows keep every eval to a second.
"$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes/computers --output data >/dev/null || { fail "prepare failed"; finish; }
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "$tiny" --data.dir=data --train.steps=2 --train.eval_every=0 \
  --parallel.tp=2 --output.dir=run >train.log 2>&1 || { cat train.log; fail "training failed"; finish; }
grep -qx "tp = 2" run/config.ini || fail "run/config.ini does not hold the run's tp=2"

for np in 1 2 3; do
  # On 2 ranks the saved tp=2 mesh fits; --parallel.tp=1 makes it dp_shard=2 like the others.
  mesh=()
  ((np == 2)) && mesh=(--parallel.tp=1)
  # shellcheck disable=SC2086
  timeout $((60 * time_scale)) $MPIEXEC -n $np "$MESHTRAIN_BIN" eval run/config.ini --batches 0 --json --train.micro_batch=7 \
    --train.seq_len=64 "${mesh[@]}" >"eval_$np.log" 2>&1 || { cat "eval_$np.log"; fail "eval on $np rank(s) failed"; continue; }
  grep '^eval:' "eval_$np.log"
  grep '^{' "eval_$np.log" >"eval_$np.json"
  if ((np != 2)); then
    grep -q "does not fit the $np rank(s) of this job" "eval_$np.log" ||
      fail "eval on $np rank(s): no message that the saved tp=2 mesh was replaced"
  fi
done
"$py" - <<'PY' || fail "eval --batches 0 differs between meshes or misses windows"
import json
tokens = json.load(open("data/meta.json"))["val_tokens"]
want = (tokens - 1) // 64
runs = {np: json.load(open(f"eval_{np}.json")) for np in (1, 2, 3)}
ok = True
for np, j in runs.items():
    print(f"  {np} rank(s): {j['windows']:.0f} windows (want {want}), {j['tokens']:.0f} tokens, loss {j['loss']!r}")
    ok &= want > 7 * 3 and j["windows"] == want and j["tokens"] == want * 64 and j["world_size"] == np
    ok &= abs(j["loss"] - runs[1]["loss"]) <= 1e-6 * abs(runs[1]["loss"])
raise SystemExit(0 if ok else 1)
PY
# --batches past the split (issue 28: 2^31-1 batches ran for hours) is clamped to the whole
# split once, with a warning: the windows and the loss of --batches 0. So is a count just past it.
tokens=$("$py" -c 'import json; print(json.load(open("data/meta.json"))["val_tokens"])')
for batches in 2147483647 $(( (tokens - 1) / 64 / 7 + 1 )); do
  # shellcheck disable=SC2086
  timeout $((60 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" eval run/config.ini --batches "$batches" --json --train.micro_batch=7 \
    --train.seq_len=64 --train.global_batch=14 --parallel.tp=1 >"clamp_$batches.log" 2>&1 ||
    { cat "clamp_$batches.log"; fail "eval --batches $batches failed"; continue; }
  grep -q "warning: eval: --batches $batches is .* windows, more than the $(( (tokens - 1) / 64 )) the val split holds; evaluating every window of the split once" \
    "clamp_$batches.log" || { cat "clamp_$batches.log"; fail "eval --batches $batches: no clamp warning"; }
  "$py" - "clamp_$batches.log" <<'PY' || fail "eval --batches $batches: not the whole split once (as --batches 0)"
import json, sys
got = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][0])
want = json.load(open("eval_2.json"))
print(f"  --batches clamp: {got['windows']:.0f} windows, loss {got['loss']!r} (--batches 0: {want['windows']:.0f}, {want['loss']!r})")
raise SystemExit(0 if got["windows"] == want["windows"] and abs(got["loss"] - want["loss"]) <= 1e-6 * abs(want["loss"]) else 1)
PY
done
# train.eval_batches past the split: the run's val_loss and eval without --batches (its
# windows) read the whole split once too, each with a warning, instead of wrapping around.
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "$tiny" --data.dir=data --train.steps=2 --train.eval_every=0 \
  --train.eval_batches=1000 --train.micro_batch=7 --train.seq_len=64 --train.global_batch=14 --output.dir=run_clamp \
  >train_clamp.log 2>&1 || { cat train_clamp.log; fail "training with train.eval_batches past the split failed"; finish; }
grep -q "warning: train.eval_batches=1000 is 14000 windows, more than the $(( (tokens - 1) / 64 )) the validation split holds: each evaluation reads every window of the split once" \
  train_clamp.log || { cat train_clamp.log; fail "train: no warning that train.eval_batches is past the split"; }
for how in default whole; do
  args=()
  [[ $how == whole ]] && args=(--batches 0)
  # shellcheck disable=SC2086
  timeout $((60 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" eval run_clamp/config.ini --json "${args[@]}" >"eval_clamp_$how.log" 2>&1 ||
    { cat "eval_clamp_$how.log"; fail "eval of run_clamp ($how) failed"; }
done
grep -q "warning: eval: train.eval_batches=1000 is 14000 windows, more than the $(( (tokens - 1) / 64 )) the val split holds; evaluating every window of the split once" \
  eval_clamp_default.log || { cat eval_clamp_default.log; fail "eval: no warning that train.eval_batches is past the split"; }
"$py" - <<'PY' || fail "train.eval_batches past the split: not the whole split once in the run and in eval"
import json
tokens = json.load(open("data/meta.json"))["val_tokens"]
run = json.load(open("run_clamp/summary.json"))["final_val_loss"]
got = {how: json.loads([l for l in open(f"eval_clamp_{how}.log") if l.startswith("{")][0]) for how in ("default", "whole")}
print(f"  eval_batches past the split: run val_loss {run!r}; eval {got['default']['windows']:.0f} windows, "
      f"loss {got['default']['loss']!r}; --batches 0 {got['whole']['windows']:.0f} windows, loss {got['whole']['loss']!r}")
ok = all(g["windows"] == (tokens - 1) // 64 for g in got.values())
ok &= all(abs(g["loss"] - run) <= 1e-6 * abs(run) for g in got.values())
raise SystemExit(0 if ok else 1)
PY
finish "eval --batches 0: the same windows and loss on 1, 2 and 3 ranks; --batches and train.eval_batches past the split are clamped to it"
