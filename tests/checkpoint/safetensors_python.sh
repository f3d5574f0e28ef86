#!/usr/bin/env bash
# meshtrain <-> the Hugging Face `safetensors` package (Python), both directions:
#   * `meshtrain convert` output (single file, sharded with index, bf16) is read by
#     safetensors and equals the checkpoint's weights; config.json is the family's HF format;
#   * files written by Python (hub-style GPT-2 in fp16 with buffers and a tied lm_head;
#     a sharded fp32 Llama) are imported by checkpoint.init_from (bitwise, checked through
#     a lr=0 run's checkpoint) and train.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON. safetensors comes from scripts/install-deps.sh.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
export PYTHONPATH="${MESHTRAIN_DEPS:-/opt/meshtrain-deps}/python${PYTHONPATH:+:$PYTHONPATH}"
py=${REFERENCE_PYTHON:-/usr/bin/python3}
check="$MESHTRAIN_SOURCE_DIR/tests/checkpoint/safetensors_check.py"
if ! "$py" -c 'import safetensors.numpy' 2>/dev/null; then
  echo "FAIL: the Python package safetensors is missing (run scripts/install-deps.sh)" >&2
  exit 1
fi
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run NAME CMD...: runs CMD with output in NAME.log; a failure shows the log.
run() {
  local name=$1
  shift
  timeout $((120 * time_scale)) "$@" >"$name.log" 2>&1 || { local rc=$?; cat "$name.log"; fail "$name: exit status $rc"; return 1; }
}
# train FAMILY NAME NP ARGS...
train() {
  local family=$1 name=$2 np=$3
  shift 3
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  run "$name" $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$MESHTRAIN_SOURCE_DIR/inputs/tiny-$family.ini" \
    --train.eval_every=0 --data.dir=random --output.dir="$name" "$@"
}
convert() {
  local name=$1
  shift
  # shellcheck disable=SC2086
  run "$name" $MPIEXEC -n 2 "$MESHTRAIN_BIN" convert "$@"
}

# ---- export ------------------------------------------------------------------------------
# gpt2 with a padded vocabulary (260 -> 264 rows): the export cuts the padding.
vocab=(--model.vocab_size=260 --model.vocab_pad_multiple=8)
train gpt2 gpt2 2 --train.steps=3 --parallel.tp=2 "${vocab[@]}"
ck=gpt2/checkpoints/step_00000003.h5
convert convert_fp32 --input gpt2/checkpoints --output hf_gpt2 &&
  "$py" "$check" exported $ck hf_gpt2 || fail "gpt2 fp32 export"
grep -q "converted .* (step 3): 28 tensors" convert_fp32.log || fail "convert did not report what it wrote"
convert convert_sharded --input $ck --output hf_gpt2_sharded --max_shard_size=64KiB &&
  "$py" "$check" exported $ck hf_gpt2_sharded || fail "gpt2 sharded export"
shards=(hf_gpt2_sharded/model-000*-of-000*.safetensors)
[[ -f hf_gpt2_sharded/model.safetensors.index.json && ${#shards[@]} -gt 1 && ! -e hf_gpt2_sharded/model.safetensors ]] ||
  { ls hf_gpt2_sharded; fail "the sharded export lacks its index or its shards"; }
convert convert_bf16 --input $ck --output hf_gpt2_bf16 --dtype bf16 &&
  "$py" "$check" exported $ck hf_gpt2_bf16 --bf16 || fail "gpt2 bf16 export"
train llama llama 2 --train.steps=3 --parallel.dp_shard=2
convert convert_llama --input llama/checkpoints/step_00000003.h5 --output hf_llama --max_shard_size=100000 &&
  "$py" "$check" exported llama/checkpoints/step_00000003.h5 hf_llama || fail "llama sharded export"
ls hf_*/*.tmp 2>/dev/null && fail "convert left temporaries"

# ---- import ------------------------------------------------------------------------------
run write_gpt2 "$py" "$check" write-gpt2 $ck hub_gpt2.safetensors || fail "writing the hub-style gpt2"
train gpt2 import_gpt2 2 --train.steps=1 --train.lr=0 --train.min_lr=0 --parallel.dp_shard=2 "${vocab[@]}" \
  --checkpoint.init_from=hub_gpt2.safetensors &&
  "$py" "$check" imported hub_gpt2.safetensors import_gpt2/checkpoints/step_00000001.h5 || fail "gpt2 import"
grep -q "initial weights from hub_gpt2.safetensors" import_gpt2.log || fail "the import is not logged"
train gpt2 finetune_gpt2 2 --train.steps=5 --parallel.tp=2 "${vocab[@]}" --checkpoint.init_from=hub_gpt2.safetensors &&
  "$py" - finetune_gpt2/metrics.jsonl <<'PY' || fail "training from the Python-written gpt2"
import json, math, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])]
print("fine-tuning losses:", " ".join(f"{x:.4f}" for x in losses))
sys.exit(0 if len(losses) == 5 and all(math.isfinite(x) for x in losses) else 1)
PY
run write_llama "$py" "$check" write-llama llama/checkpoints/step_00000003.h5 hub_llama || fail "writing the llama"
train llama import_llama 4 --train.steps=1 --train.lr=0 --train.min_lr=0 --parallel.dp_shard=2 --parallel.tp=2 \
  --checkpoint.init_from=hub_llama &&
  "$py" "$check" imported hub_llama import_llama/checkpoints/step_00000001.h5 || fail "llama sharded import"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "safetensors interop: all checks passed"
