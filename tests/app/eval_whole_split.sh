#!/usr/bin/env bash
# `meshtrain eval --batches 0` evaluates every non-overlapping window of the split exactly
# once, whatever the mesh (issue 16, claim 5): on 1, 2 and 3 ranks the window count is
# (validation tokens - 1) // seq_len, computed here from meta.json, and the losses agree
# (1e-6 relative: the same windows, summed in another order). micro_batch 7 divides
# neither the window count nor 7 x ranks, so the last micro-batch is always partial.
# Also: a run's config.ini with a tensor-parallel mesh (tp=2 on 2 ranks) evaluates on 1
# and 3 ranks (the saved mesh does not fit, plain FSDP is used, with a message).
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
finish "eval --batches 0: the same windows and loss on 1, 2 and 3 ranks; --batches past the split is clamped to it"
