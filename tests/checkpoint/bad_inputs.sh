#!/usr/bin/env bash
# Every corrupt or mismatched checkpoint input through the CLI, on 1 and 2 ranks: exit
# status 2, exactly one error message naming the file and the problem, and nothing
# written over (the checkpoint directory and convert's output stay as they were).
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
export PYTHONPATH="${MESHTRAIN_DEPS:-/opt/meshtrain-deps}/python${PYTHONPATH:+:$PYTHONPATH}"
py=${REFERENCE_PYTHON:-/usr/bin/python3}
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ini="$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini"
common=(--train.steps=2 --train.eval_every=0 --data.dir=random)

timeout 120 "$MESHTRAIN_BIN" train "$ini" "${common[@]}" --output.dir=good >good.log 2>&1 ||
  { cat good.log; echo "FAIL: the good run failed"; exit 1; }
good=good/checkpoints/step_00000002.h5

# Damaged copies of the good checkpoint.
cp $good truncated.h5 && truncate -s $(($(stat -c %s $good) / 2)) truncated.h5
head -c 5000 /dev/urandom >garbage.h5
"$py" - "$good" <<'EOF' || fail "preparing the damaged checkpoints"
import shutil, sys, h5py, numpy as np
good = sys.argv[1]
def variant(name, edit):
    shutil.copy(good, name)
    with h5py.File(name, "r+") as f:
        edit(f)
variant("version.h5", lambda f: f.attrs.modify("format_version", np.int64(99)))
variant("missing.h5", lambda f: f.__delitem__("optim/exp_avg/transformer.h.1.mlp.c_fc.weight"))
def reshape(f):
    del f["model/transformer.ln_f.weight"]
    f.create_dataset("model/transformer.ln_f.weight", data=np.zeros(65, np.float32))
variant("shape.h5", reshape)
def retype(f):
    del f["optim/exp_avg_sq/transformer.ln_f.bias"]
    f.create_dataset("optim/exp_avg_sq/transformer.ln_f.bias", data=np.zeros(64, np.float64))
variant("dtype.h5", retype)
EOF
mkdir -p dangling && echo step_00000099.h5 >dangling/latest
mkdir -p empty_dir
# Safetensors that break a rule, and one that lacks a parameter.
"$py" - <<'EOF' || fail "preparing the bad safetensors"
import numpy as np
from safetensors.numpy import save_file
save_file({"transformer.wte.weight": np.zeros((264, 64), np.float32)}, "partial.safetensors")
data = open("partial.safetensors", "rb").read()
open("trailing.safetensors", "wb").write(data + b"\0\0\0\0")
EOF
before=$(ls -l good/checkpoints dangling | md5sum)

# run NP NAME COMMAND ARGS...
run() {
  local np=$1 name=$2
  shift 2
  if [[ $np == 1 ]]; then
    timeout 120 "$MESHTRAIN_BIN" "$@" >"$name.out" 2>"$name.err"
  else
    # shellcheck disable=SC2086  # MPIEXEC is a command with flags
    timeout 120 $MPIEXEC -n "$np" "$MESHTRAIN_BIN" "$@" >"$name.out" 2>"$name.err"
  fi
  rc=$?
}

# NAME | expected text | command and arguments
cases=(
  "truncated|truncated.h5 cannot be opened by HDF5: the file is truncated or damaged|train $ini ${common[*]} --output.dir=o1 --checkpoint.resume=truncated.h5"
  "not_hdf5|garbage.h5 is not an HDF5 file|train $ini ${common[*]} --output.dir=o2 --checkpoint.resume=garbage.h5"
  "version|version.h5 has format version 99|train $ini ${common[*]} --output.dir=o3 --checkpoint.resume=version.h5"
  "model_config|was written for a different model (d_model: 64 in the checkpoint, 128 in this run|train $ini ${common[*]} --output.dir=o4 --model.d_model=128 --checkpoint.resume=$good"
  "family|family: gpt2 in the checkpoint, llama in this run|train $MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini ${common[*]} --output.dir=o5 --checkpoint.resume=$good"
  "missing_dataset|missing.h5 lacks the dataset /optim/exp_avg/transformer.h.1.mlp.c_fc.weight|train $ini ${common[*]} --output.dir=o6 --checkpoint.resume=missing.h5"
  "wrong_shape|shape.h5: dataset /model/transformer.ln_f.weight has shape (65), expected (64)|train $ini ${common[*]} --output.dir=o7 --checkpoint.resume=shape.h5"
  "wrong_dtype|dtype.h5: dataset /optim/exp_avg_sq/transformer.ln_f.bias has dtype float64, expected float32|train $ini ${common[*]} --output.dir=o8 --checkpoint.resume=dtype.h5"
  "latest_nowhere|dangling/latest points to dangling/step_00000099.h5 which does not exist|train $ini ${common[*]} --output.dir=o9 --checkpoint.dir=dangling"
  "resume_missing|checkpoint.resume=nothing.h5: no such file or directory|train $ini ${common[*]} --output.dir=o10 --checkpoint.resume=nothing.h5"
  "safetensors_trailing|trailing.safetensors: the tensors cover 67584 bytes but the data buffer holds 67588 (trailing bytes)|train $ini ${common[*]} --output.dir=o11 --checkpoint.init_from=trailing.safetensors"
  "safetensors_partial|partial.safetensors lack the parameter transformer.wpe.weight|train $ini ${common[*]} --output.dir=o12 --checkpoint.init_from=partial.safetensors"
  "convert_truncated|truncated.h5 cannot be opened by HDF5|convert --input truncated.h5 --output c1"
  "convert_missing|nothing.h5 does not exist|convert --input nothing.h5 --output c2"
  "convert_no_output|--output is required|convert --input $good"
  "convert_dtype|--dtype must be fp32 or bf16, not 'fp16'|convert --input $good --output c3 --dtype fp16"
  "convert_shard|--max_shard_size|convert --input $good --output c4 --max_shard_size=lots"
  "convert_latest|checkpoint directory dangling: dangling/latest points to|convert --input dangling --output c5"
  "convert_empty_dir|--input empty_dir: the directory holds no complete checkpoint|convert --input empty_dir --output c6"
)
for np in 1 2; do
  for c in "${cases[@]}"; do
    IFS='|' read -r name expect args <<<"$c"
    name="${name}_np$np"
    # shellcheck disable=SC2086  # args is a word list without spaces in its words
    run $np "$name" $args
    echo "--- $name: exit $rc: $(cat "$name.err")"
    [[ $rc -eq 2 ]] || fail "$name: exit status $rc, expected 2"
    [[ $(grep -c 'meshtrain [a-z]*: error:' "$name.err") -eq 1 ]] || fail "$name: not exactly one error message"
    grep -qF -- "$expect" "$name.err" || fail "$name: the message lacks '$expect'"
    grep -q 'HDF5-DIAG' "$name.err" "$name.out" && fail "$name: HDF5's error stack was printed"
  done
done
[[ $(ls -l good/checkpoints dangling | md5sum) == "$before" ]] || fail "a failed run changed a checkpoint directory"
for d in c1 c2 c3 c4 c5 c6; do [[ ! -e $d ]] || [[ -z $(ls -A $d) ]] || fail "a failed convert left files in $d"; done
for d in o1 o2 o3 o4 o5 o6 o7 o8 o9 o10 o11 o12; do
  [[ ! -e $d ]] || fail "a failed run created its output.dir $d (start-up errors write nothing)"
done

run 1 convert_help convert --help
[[ $rc -eq 0 ]] && grep -q -- '--max_shard_size' convert_help.out || fail "convert --help: status $rc or no option list"

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "checkpoint bad inputs: all checks passed"
