#!/usr/bin/env bash
# Trains tiny-$EQUIV_FAMILY for 20 steps on $EQUIV_NP ranks with $EQUIV_ARGS and compares
# its metrics.jsonl with the 1-rank baseline (the equiv_<family>_baseline_np1 fixture):
# losses and global gradient norms within 1e-5 relative at every step, and the final
# parameters (the final checkpoints, read with h5py) within 1e-4.
set -euo pipefail
family=${EQUIV_FAMILY:?}
np=${EQUIV_NP:?}
base="$MESHTRAIN_BUILD_DIR/tests/parallel/tmp/equiv_${family}_baseline"
name=$(basename "$TEST_TMP")
out="$TEST_TMP"
[[ "$name" == *baseline* ]] && out="$base"
rm -rf "$out" && mkdir -p "$out"
# shellcheck disable=SC2086
$MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-$family.ini" \
  --train.steps=20 --train.global_batch=8 --train.eval_every=0 --data.dir=random \
  --checkpoint.save_final=true --output.dir="$out" $EQUIV_ARGS > "$out/log.txt" 2>&1 || { cat "$out/log.txt"; exit 1; }
[[ "$out" == "$base" ]] && exit 0
python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" "$base/metrics.jsonl" "$out/metrics.jsonl" \
  --rtol 1e-5 --keys loss grad_norm --label "$name"
"${REFERENCE_PYTHON:-/usr/bin/python3}" - "$base" "$out" "$name" <<'PY'
import glob, sys
import h5py, numpy as np
base, cand, name = sys.argv[1:4]
a = h5py.File(glob.glob(f"{base}/checkpoints/step_00000020.h5")[0], "r")["model"]
b = h5py.File(glob.glob(f"{cand}/checkpoints/step_00000020.h5")[0], "r")["model"]
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
worst = max(float(np.abs(a[n][...] - b[n][...]).max()) for n in names)
print(f"{name}: final parameters, worst absolute difference over {len(names)} tensors: {worst:.2e}")
assert worst <= 1e-4, f"final parameters differ by {worst:.2e} > 1e-4"
PY
