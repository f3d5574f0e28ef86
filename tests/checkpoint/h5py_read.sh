#!/usr/bin/env bash
# h5py reads every parameter of a 4-rank checkpoint (dp_shard=2 x tp=2, full_shard) under
# its Hugging Face name with its full shape, and it equals what a 1-rank run of the same
# training wrote: bitwise for weights that training left alone (lr = 0: the mesh-
# independent initialisation), within 1e-4 of each tensor's scale after 3 steps (the
# reduction order differs by mesh). Both families; also tp=4 (llama: k/v replicated over tp).
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
py=${REFERENCE_PYTHON:-/usr/bin/python3}
check="$MESHTRAIN_SOURCE_DIR/tests/checkpoint/check_h5.py"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# train FAMILY NAME NP ARGS...: 3 steps, final checkpoint in NAME/checkpoints.
train() {
  local family=$1 name=$2 np=$3
  shift 3
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-$family.ini" \
    --train.steps=3 --train.eval_every=0 --data.dir=random --output.dir="$name" "$@" >"$name.log" 2>&1 ||
    { cat "$name.log"; fail "$name: training exited non-zero"; }
}

for family in gpt2 llama; do
  train $family ${family}_np1 1
  train $family ${family}_np4 4 --parallel.dp_shard=2 --parallel.tp=2 --parallel.strategy=full_shard
  train $family ${family}_lr0_np1 1 --train.lr=0 --train.min_lr=0
  train $family ${family}_lr0_np4 4 --parallel.dp_shard=2 --parallel.tp=2 --parallel.strategy=full_shard \
    --train.lr=0 --train.min_lr=0
  train $family ${family}_tp4 4 --parallel.tp=4 --parallel.strategy=full_shard
  ck=checkpoints/step_00000003.h5
  "$py" "$check" $family ${family}_np1/$ck ${family}_np4/$ck --mesh 1x2x2 --step 3 ||
    fail "$family: 4-rank checkpoint differs from the 1-rank one"
  "$py" "$check" $family ${family}_np1/$ck ${family}_tp4/$ck --mesh 1x1x4 --step 3 ||
    fail "$family: tp=4 checkpoint differs from the 1-rank one"
  # With lr = 0 the weights stay at their initial values; the moments still move.
  "$py" - "${family}_lr0_np1/$ck" "${family}_lr0_np4/$ck" <<'EOF' || fail "$family: lr=0 weights not bitwise equal"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
bad = [n for n in a["model"] if not np.array_equal(a["model"][n][...].view(np.uint32), b["model"][n][...].view(np.uint32))]
print(f"lr=0: {len(a['model'])} weight tensors, {len(bad)} differ bitwise between 1 and 4 ranks")
sys.exit(1 if bad or len(a["model"]) == 0 else 0)
EOF
done

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "h5py checks passed"
