#!/usr/bin/env bash
# Trains tiny-$EQUIV_FAMILY for 20 steps on $EQUIV_NP ranks with $EQUIV_ARGS and
# train.global_batch=$EQUIV_GLOBAL_BATCH (default 8) and compares it with a 1-rank run of the
# same global batch (the CTest fixture $EQUIV_BASELINE, whose TEST_TMP holds that run):
# losses and global gradient norms within 1e-5 relative at every step, and the final
# parameters (the final checkpoints, read with h5py) within 1e-4.
# Without EQUIV_BASELINE this run is a baseline: it trains into its own TEST_TMP and stops.
set -euo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
family=${EQUIV_FAMILY:?}
np=${EQUIV_NP:?}
global_batch=${EQUIV_GLOBAL_BATCH:-8}
name=$(basename "$TEST_TMP")
out="$TEST_TMP"
rm -rf "$out" && mkdir -p "$out"
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-$family.ini" \
  --train.steps=20 --train.global_batch="$global_batch" --train.eval_every=0 --data.dir=random \
  --checkpoint.save_final=true --output.dir="$out" $EQUIV_ARGS > "$out/log.txt" 2>&1 || { cat "$out/log.txt"; exit 1; }
[[ -n ${EQUIV_BASELINE:-} ]] || exit 0
base="$(dirname "$TEST_TMP")/$EQUIV_BASELINE"
[[ -f "$base/checkpoints/step_00000020.h5" ]] ||
  { echo "FAIL: the baseline run $base is missing (run the fixture test $EQUIV_BASELINE first)"; exit 1; }
grep -q "batch: $global_batch sequences" "$base/log.txt" ||
  { echo "FAIL: the baseline $EQUIV_BASELINE did not train with global_batch $global_batch"; exit 1; }
grep "^mesh " "$out/log.txt"
python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" "$base/metrics.jsonl" "$out/metrics.jsonl" \
  --rtol 1e-5 --keys loss grad_norm --label "$name"
"${REFERENCE_PYTHON:-/usr/bin/python3}" - "$base" "$out" "$name" <<'PY'
import sys
import h5py, numpy as np
base, cand, name = sys.argv[1:4]
a = h5py.File(f"{base}/checkpoints/step_00000020.h5", "r")["model"]
b = h5py.File(f"{cand}/checkpoints/step_00000020.h5", "r")["model"]
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
worst = max(float(np.abs(a[n][...] - b[n][...]).max()) for n in names)
print(f"{name}: final parameters, worst absolute difference over {len(names)} tensors: {worst:.2e}")
assert worst <= 1e-4, f"final parameters differ by {worst:.2e} > 1e-4"
PY
