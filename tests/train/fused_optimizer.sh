#!/usr/bin/env bash
# gpu.fused_optimizer (the device-resident norm and clip, one AdamW launch per FSDP unit) is
# bitwise the unfused step on host builds: the same losses and gradient norms at every step
# and the same final checkpoint (parameters and both AdamW moments), with clipping active
# (grad_clip below the norms), a skipped step (an injected NaN gradient) and
#  * 1 rank, no_shard, bf16: AdamW also writes the bf16 compute copy the next forward reads;
#  * 2 ranks, full_shard, fp32: sharded states, the norm summed over the world.
set -euo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
py=${REFERENCE_PYTHON:-/usr/bin/python3}
src=$MESHTRAIN_SOURCE_DIR
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP"
run() {  # NAME NP FUSED ARGS...
  local name=$1 np=$2 fused=$3
  shift 3
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$src/inputs/tiny-gpt2.ini" --train.steps=8 \
    --train.eval_every=0 --train.grad_clip=0.3 --train.inject_nan_steps=3 --checkpoint.save_final=true \
    --gpu.fused_optimizer="$fused" --output.dir="$name" "$@" > "$name.log" 2>&1 ||
    { cat "$name.log"; echo "FAIL: training run $name"; exit 1; }
}
for fused in true false; do
  run "bf16_$fused" 1 "$fused" --parallel.strategy=no_shard --train.precision=bf16
  run "shard_$fused" 2 "$fused" --parallel.strategy=full_shard
done
for case in bf16 shard; do
  "$py" - "${case}_false/metrics.jsonl" "${case}_true/metrics.jsonl" "$case" <<'PY'
import json, math, sys
ref, cand = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert [r["step"] for r in ref] == [r["step"] for r in cand] and len(ref) == 8, "steps differ"
for a, b in zip(ref, cand):
    for k in ("loss", "grad_norm", "lr"):
        # A skipped step's norm is NaN (null in the record) in both, or it is a mismatch.
        assert repr(a.get(k)) == repr(b.get(k)), f"step {a['step']}: {k} fused {b.get(k)!r} != unfused {a.get(k)!r}"
norms = [r.get("grad_norm") for r in cand]
finite = [n for n in norms if n is not None and math.isfinite(n)]
# Step 3's gradients were poisoned: skipped; every other norm above the 0.3 clip.
assert len(finite) == len(norms) - 1, f"expected exactly one skipped step: norms {norms}"
assert all(n > 0.3 for n in finite), f"clipping not exercised: norms {norms}"
print(f"fused optimizer ({sys.argv[3]}): loss, grad_norm, lr bitwise equal over {len(ref)} steps; norms {norms}")
PY
  "$py" "$src/tests/checkpoint/check_h5.py" gpt2 "${case}_false/checkpoints/step_00000008.h5" \
    "${case}_true/checkpoints/step_00000008.h5" --exact --step 8 ||
    { echo "FAIL: fused and unfused final checkpoints differ ($case)"; exit 1; }
done
echo "fused optimizer: all checks passed"
