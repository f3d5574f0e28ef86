#!/usr/bin/env bash
# The trainer's step lag (train/trainer.cpp, step_lag): on GPUs the host queues step s + 1
# before it reads step s back and logs it. Host builds run without the lag; this test forces
# it (MESHTRAIN_STEP_LAG=1) and requires everything a run writes to equal the run without it:
# every metrics.jsonl line (the same steps, every value but the timings, the evaluation,
# checkpoint-save and skipped-step fields on the same lines), every checkpoint bit for bit,
# and summary.json's counts -- with evaluations, periodic saves, log_every 2, a skipped step
# (an injected NaN), on 1 rank and on 2 (full_shard); a resume with the lag continuing a run
# made without it; and an abort after too many skipped steps (the step queued behind the
# failing one is dropped: not counted, logged or saved).
set -euo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
py=${REFERENCE_PYTHON:-/usr/bin/python3}
src=$MESHTRAIN_SOURCE_DIR
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP"
run() {  # NAME NP LAG [expected status] ARGS...
  local name=$1 np=$2 lag=$3 want=$4
  shift 4
  local rc=0
  # shellcheck disable=SC2086
  MESHTRAIN_STEP_LAG=$lag timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train \
    "$src/inputs/tiny-gpt2.ini" --train.steps=10 --train.eval_every=4 --train.log_every=2 \
    --checkpoint.every=3 --checkpoint.keep=10 --output.dir="$name" "$@" > "$name.log" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || { cat "$name.log"; echo "FAIL: run $name exited $rc, expected $want"; exit 1; }
}
compare() {  # REFERENCE_DIR CANDIDATE_DIR [CHECKPOINT_STEPS...]
  local ref=$1 cand=$2
  shift 2
  "$py" - "$ref/metrics.jsonl" "$cand/metrics.jsonl" <<'PY'
import json, sys
ref, cand = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
timing = {"tokens_per_s", "mfu", "peak_mem_bytes", "peak_rss_bytes", "step_time_s", "compute_s_min", "compute_s_max",
          "comm_s_min", "comm_s_max", "exposed_comm_s_min", "exposed_comm_s_max", "counted_tokens_per_s",
          "ckpt_save_s", "ckpt_save_gbps", "ckpt_load_s", "ckpt_load_gbps", "ckpt_save_held_s",
          "ckpt_save_background_cpu_s"}
assert [r["step"] for r in ref] == [r["step"] for r in cand], \
    f"logged steps differ: {[r['step'] for r in ref]} vs {[r['step'] for r in cand]}"
for a, b in zip(ref, cand):
    assert set(a) == set(b), f"step {a['step']}: fields differ: {sorted(set(a) ^ set(b))}"
    for k in a:
        if k in timing:
            continue
        assert repr(a[k]) == repr(b[k]), f"step {a['step']}: {k} {b[k]!r} with the lag, {a[k]!r} without"
print(f"{sys.argv[2]}: {len(ref)} metrics lines equal (steps {[r['step'] for r in ref]})")
PY
  for step in "$@"; do
    local f
    f=$(printf "checkpoints/step_%08d.h5" "$step")
    "$py" "$src/tests/checkpoint/check_h5.py" gpt2 "$ref/$f" "$cand/$f" --exact --step "$step" > /dev/null ||
      { echo "FAIL: $cand/$f differs from $ref/$f"; exit 1; }
  done
  "$py" - "$ref/summary.json" "$cand/summary.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("final_loss", "final_val_loss", "skipped_steps", "optimizer_updates"):
    assert repr(a[k]) == repr(b[k]), f"summary.json {k}: {b[k]!r} with the lag, {a[k]!r} without"
PY
}
# 1 rank, bf16 no_shard (AdamW writes the compute copy) and 2 ranks full_shard.
nan=--train.inject_nan_steps=5
run lag0 1 0 0 --parallel.strategy=no_shard --train.precision=bf16 $nan
run lag1 1 1 0 --parallel.strategy=no_shard --train.precision=bf16 $nan
compare lag0 lag1 3 6 9 10
run shard0 2 0 0 --parallel.strategy=full_shard $nan
run shard1 2 1 0 --parallel.strategy=full_shard $nan
compare shard0 shard1 3 6 9 10
grep -Eq '"skipped_steps": ?1' lag1/metrics.jsonl || { echo "FAIL: the injected NaN step was not skipped"; exit 1; }
# A resume from step 6 of the run without the lag, with and without it: the same lines (the
# first after the load carries the load) and checkpoints, and bitwise the uninterrupted run's.
for lag in 0 1; do
  mkdir "resumed$lag"
  cp -r lag0/checkpoints "resumed$lag/"
  rm -f "resumed$lag"/checkpoints/step_0000000{9,10}.h5 "resumed$lag"/checkpoints/step_00000010.h5 \
    "resumed$lag/checkpoints/latest"
  "$py" - lag0/metrics.jsonl "resumed$lag/metrics.jsonl" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if json.loads(l)["step"] <= 6]
open(sys.argv[2], "w").writelines(lines)
PY
  run "resumed$lag" 1 "$lag" 0 --parallel.strategy=no_shard --train.precision=bf16 $nan --checkpoint.resume=auto
done
compare resumed0 resumed1 9 10
"$py" "$src/tests/checkpoint/check_h5.py" gpt2 lag0/checkpoints/step_00000010.h5 resumed1/checkpoints/step_00000010.h5 \
  --exact --step 10 > /dev/null || { echo "FAIL: the resumed run with the lag ends elsewhere than the uninterrupted one"; exit 1; }
# An abort: step 5 is the second non-finite one with train.max_skipped_steps=1.
run abort0 1 0 3 --parallel.strategy=no_shard --train.inject_nan_steps=3,5 --train.max_skipped_steps=1
run abort1 1 1 3 --parallel.strategy=no_shard --train.inject_nan_steps=3,5 --train.max_skipped_steps=1
compare abort0 abort1 3
echo "step lag: all checks passed"
