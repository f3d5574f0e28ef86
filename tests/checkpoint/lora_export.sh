#!/usr/bin/env bash
# A LoRA checkpoint never loses its adapters on export (issue 18, must-show 0), for both
# families (GPT-2's Conv1D stores its projections transposed):
#   * `convert --merge_lora` writes a full Hugging Face directory whose evaluation equals
#     the checkpoint's loss within 1e-5 nats (and differs from the base model's);
#   * `convert` without it writes a PEFT adapter: adapter_model.safetensors under PEFT's
#     names with the checkpoint's adapter values, adapter_config.json with r, lora_alpha,
#     target_modules and the base model; base + (alpha/r) B A equals the merged weights;
#   * the checkpoint holds the adapters only: both exports read the base through its
#     reference (PEFT names it, --merge_lora reads it);
#   * --merge_lora of a checkpoint without adapters is one clear error (exit 2); a LoRA
#     checkpoint evaluated with a config that has no adapters uses the checkpoint's.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC,
# TEST_TMP, REFERENCE_PYTHON. safetensors comes from scripts/install-deps.sh.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
export PYTHONPATH="${MESHTRAIN_DEPS:-/opt/meshtrain-deps}/python${PYTHONPATH:+:$PYTHONPATH}"
py=${REFERENCE_PYTHON:-/usr/bin/python3}
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
run() {
  local name=$1
  shift
  timeout $((300 * time_scale)) "$@" >"$name.log" 2>&1 || { local rc=$?; cat "$name.log"; fail "$name: exit status $rc"; return 1; }
}
# json_loss LOG: the loss of `meshtrain eval --json`'s JSON line.
json_loss() { "$py" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]["loss"])' "$1"; }

run prepare "$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes --output data || exit 1
for family in llama gpt2; do
  ini="$MESHTRAIN_SOURCE_DIR/inputs/tiny-$family.ini"
  targets=$([[ $family == gpt2 ]] && echo "c_attn,attn.c_proj,c_fc,mlp.c_proj" || echo "q,k,v,o,gate,up,down")
  lora=(--model.lora_rank=4 --model.lora_alpha=8 --model.lora_targets="$targets")
  common=(--data.dir=data --train.eval_every=0)
  run "pre_$family" "$MESHTRAIN_BIN" train "$ini" "${common[@]}" --train.steps=10 --output.dir="pre_$family" || continue
  run "base_$family" "$MESHTRAIN_BIN" convert --input "pre_$family/checkpoints" --output "base_$family" || continue
  # 2 ranks with tp=2: adapters of both column- and row-parallel projections are split.
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  run "lora_$family" $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "$ini" "${common[@]}" "${lora[@]}" --train.steps=15 \
    --train.lr=1e-2 --parallel.tp=2 --checkpoint.init_from="base_$family" --output.dir="lora_$family" || continue
  ck=$(ls "lora_$family"/checkpoints/step_*.h5 | tail -1)

  run "eval_ck_$family" "$MESHTRAIN_BIN" eval "$ini" "${common[@]}" "${lora[@]}" --checkpoint "$ck" --json || continue
  run "merge_$family" "$MESHTRAIN_BIN" convert --input "$ck" --output "merged_$family" --merge_lora || continue
  grep -q "with its LoRA adapters merged" "merge_$family.log" || fail "$family: convert --merge_lora did not say it merged"
  run "eval_merged_$family" "$MESHTRAIN_BIN" eval "$ini" "${common[@]}" --checkpoint "merged_$family" --json || continue
  run "eval_base_$family" "$MESHTRAIN_BIN" eval "$ini" "${common[@]}" --checkpoint "base_$family" --json || continue
  ck_loss=$(json_loss "eval_ck_$family.log") merged_loss=$(json_loss "eval_merged_$family.log")
  base_loss=$(json_loss "eval_base_$family.log")
  echo "$family: checkpoint $ck_loss, merged export $merged_loss, base model $base_loss"
  "$py" -c "import sys; c, m, b = map(float, sys.argv[1:]); sys.exit(0 if abs(c - m) <= 1e-5 and abs(c - b) > 1e-3 else 1)" \
    "$ck_loss" "$merged_loss" "$base_loss" ||
    fail "$family: the merged export evaluates to $merged_loss, the checkpoint to $ck_loss (base model: $base_loss)"

  run "peft_$family" "$MESHTRAIN_BIN" convert --input "$ck" --output "peft_$family" || continue
  grep -q "as a PEFT adapter (base model: $TEST_TMP/base_$family)" "peft_$family.log" ||
    fail "$family: convert did not name the PEFT base (the checkpoint's base reference)"
  [[ ! -e "peft_$family/model.safetensors" && ! -e "peft_$family/config.json" ]] ||
    fail "$family: the PEFT export holds base-model files"
  "$py" - "$ck" "peft_$family" "merged_$family" "$family" "$targets" "base_$family" <<'PY' || fail "$family: PEFT adapter check"
import json, os, sys
import h5py, numpy as np
from safetensors.numpy import load_file
ck, peft, merged, family, targets, base_dir = sys.argv[1:]
cfg = json.load(open(f"{peft}/adapter_config.json"))
want_targets = [t + "_proj" for t in targets.split(",")] if family == "llama" else targets.split(",")
assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM", cfg
assert cfg["r"] == 4 and cfg["lora_alpha"] == 8 and cfg["target_modules"] == want_targets, cfg
assert os.path.samefile(cfg["base_model_name_or_path"], base_dir), cfg
assert cfg["fan_in_fan_out"] == (family == "gpt2"), cfg
adapters = load_file(f"{peft}/adapter_model.safetensors")
merged_w = load_file(f"{merged}/model.safetensors")
base_w = load_file(f"{base_dir}/model.safetensors")  # the checkpoint holds the adapters only
scale = cfg["lora_alpha"] / cfg["r"]
with h5py.File(ck, "r") as f:
    m = f["model"]
    lora_names = [k for k in m if ".lora_" in k]
    assert sorted("base_model.model." + k for k in lora_names) == sorted(adapters), (sorted(adapters)[:4], lora_names[:4])
    for k in lora_names:
        got = adapters["base_model.model." + k]
        assert got.dtype == np.float32 and got.shape == m[k].shape and np.array_equal(got, m[k][...]), k
    bases = sorted({k.rsplit(".lora_", 1)[0] for k in lora_names})
    for mod in bases:
        A = adapters[f"base_model.model.{mod}.lora_A.weight"].astype(np.float64)
        B = adapters[f"base_model.model.{mod}.lora_B.weight"].astype(np.float64)
        delta = scale * (B @ A)  # (out, in)
        if cfg["fan_in_fan_out"]:
            delta = delta.T  # Conv1D weights are (in, out)
        want = (base_w[mod + ".weight"].astype(np.float64) + delta)
        got = merged_w[mod + ".weight"].astype(np.float64)
        assert np.abs(B).max() > 0, f"{mod}: B is zero, the adapter was not trained"
        assert np.allclose(got, want, rtol=1e-6, atol=1e-7), f"{mod}: merged != base + scale B A (max diff {np.abs(got - want).max()})"
    assert not [k for k in m if ".lora_" not in k], "the LoRA checkpoint holds base weights"
    others = [k for k in base_w if k.rsplit(".weight", 1)[0] not in bases]
    for k in others:
        assert np.array_equal(merged_w[k], base_w[k]), f"{k}: a tensor without adapters changed in the merge"
print(f"{family}: {len(lora_names)} adapters in PEFT layout, {len(bases)} merged projections = base + scale B A")
PY

  # Wrong uses: one sentence, exit 2, nothing written.
  "$MESHTRAIN_BIN" convert --input "pre_$family/checkpoints" --output "bad_merge_$family" --merge_lora > bad_merge.log 2>&1
  rc=$?
  [[ $rc == 2 && ! -e "bad_merge_$family" ]] && grep -q "has no LoRA adapters" bad_merge.log ||
    { cat bad_merge.log; fail "$family: --merge_lora without adapters gave status $rc"; }
  # The merged directory's config.json sets the model keys: no config file needed, and a
  # given key that disagrees is one error naming both values.
  run "eval_merged_noini_$family" "$MESHTRAIN_BIN" eval "${common[@]}" --train.seq_len=32 --train.micro_batch=2 \
    --train.global_batch=8 --train.eval_batches=2 --checkpoint "merged_$family" --json &&
    [[ $(json_loss "eval_merged_noini_$family.log") == "$merged_loss" ]] ||
    fail "$family: the merged export evaluated without a config file gives $(json_loss "eval_merged_noini_$family.log")"
  "$MESHTRAIN_BIN" eval "$ini" "${common[@]}" --model.d_model=32 --checkpoint "merged_$family" > bad_shape.log 2>&1
  rc=$?
  [[ $rc == 2 ]] && grep -q "model.d_model = 32 is given, but --checkpoint=merged_$family describes a model with model.d_model = 64" bad_shape.log ||
    { cat bad_shape.log; fail "$family: a model key disagreeing with config.json gave status $rc"; }
  # The checkpoint's LoRA settings are used even when the config has none: no silent
  # evaluation of the base model.
  run "eval_nolora_$family" "$MESHTRAIN_BIN" eval "$ini" "${common[@]}" --checkpoint "$ck" --json &&
    [[ $(json_loss "eval_nolora_$family.log") == "$ck_loss" ]] ||
    fail "$family: a LoRA checkpoint evaluated without the LoRA keys gives $(json_loss "eval_nolora_$family.log"), not $ck_loss"
done

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "LoRA export: all checks passed"
