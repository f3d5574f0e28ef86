#!/usr/bin/env bash
# LoRA settings are part of the model a checkpoint describes (issue 16, claims 3 and 4):
#  * model.lora_targets defaults to auto: PEFT's attention default, c_attn (gpt2) and q,v
#    (llama); --model.lora_rank=4 alone trains on both families, and the checkpoint's
#    /model attributes record rank, alpha and the resolved targets;
#  * eval takes the LoRA settings from the checkpoint: without LoRA keys (or with other
#    ones) it evaluates the adapted model, not the base model (the loss differs from the
#    base checkpoint's and equals the eval with the right keys);
#  * resume with other LoRA settings is exit 2 naming both values; init_from of a LoRA
#    checkpoint without the same settings is exit 2 (adapters are never dropped), with
#    them it loads; a resume of the LoRA run into its base's directory with
#    checkpoint.overwrite=true is exit 2 (the base its checkpoints name would be deleted);
#  * convert exports the adapters as a PEFT adapter (not a model directory: eval refuses it)
#    or merged into the base (--merge_lora: evaluates to the checkpoint's loss); a
#    checkpoint whose settings were removed is refused by its adapters-only contents
#    (exit 2 instead of silently ignoring its adapters); a random base drawn with another
#    model.init_std is rebuilt with it by the merge, and an eval under another is exit 2.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
bin=$MESHTRAIN_BIN
llama=$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini

"$bin" prepare --input /usr/share/games/fortunes/computers --output data >/dev/null || { fail "prepare failed"; finish; }
common=(--data.dir=data --train.eval_every=0 --train.eval_batches=2)

# expect_error LABEL MUST_NAME... : the last command exited 2 with one error line naming each.
expect_error() {
  local label=$1
  shift
  [[ $rc -eq 2 ]] || fail "$label: exit status $rc, expected 2"
  [[ $(grep -c "error:" err.log) -eq 1 ]] || fail "$label: not exactly one error line"
  for s in "$@"; do grep -qF -- "$s" err.log || fail "$label: the message does not name '$s'"; done
  sed 's/^/  /' err.log
}
run() { "$bin" "$@" >out.log 2>err.log; rc=$?; }
eval_loss() { "$py" -c 'import json,sys; print(json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])["loss"])' out.log; }
# merged_equals_checkpoint LABEL CHECKPOINTS EXPORT LOSS: convert --merge_lora CHECKPOINTS into
# EXPORT, whose eval must give the checkpoint's LOSS (1e-5 nats).
merged_equals_checkpoint() {
  local label=$1 checkpoints=$2 export=$3 want=$4 got
  run convert --input "$checkpoints" --output "$export" --merge_lora
  [[ $rc -eq 0 ]] || { cat err.log; fail "$label: convert --merge_lora failed"; return; }
  run eval "$tiny" --data.dir=data --checkpoint "$export" --json
  got=$(eval_loss)
  echo "  val loss, $label: merged export $got, checkpoint $want"
  "$py" -c "import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 1e-5 else 1)" "$got" "$want" ||
    fail "$label: eval of the merged export ($got) != eval of the checkpoint ($want)"
}

echo "--- lora_targets=auto on both families"
run train "$tiny" "${common[@]}" --train.steps=2 --output.dir=base
[[ $rc -eq 0 ]] || { cat err.log; fail "base training failed"; finish; }
run train "$tiny" "${common[@]}" --train.steps=6 --train.lr=2e-2 --train.min_lr=2e-2 --checkpoint.init_from=base/checkpoints \
  --model.lora_rank=4 --output.dir=lora
[[ $rc -eq 0 ]] || { cat out.log err.log; fail "gpt2 --model.lora_rank=4 with the default targets failed"; finish; }
grep -q "LoRA fine-tuning: rank 4, alpha 16 (scale 4) on c_attn: [0-9]* trainable parameters" out.log ||
  fail "the LoRA run does not log its settings and trainable-parameter count"
run train "$llama" "${common[@]}" --train.steps=2 --model.lora_rank=4 --output.dir=lora_llama
[[ $rc -eq 0 ]] || { cat err.log; fail "llama --model.lora_rank=4 with the default targets failed"; }
"$py" - <<'PY' || fail "the checkpoints do not record the LoRA settings"
import glob, h5py
for run, targets in (("lora", "c_attn"), ("lora_llama", "q,v")):
    m = h5py.File(sorted(glob.glob(f"{run}/checkpoints/step_*.h5"))[-1], "r")["model"]
    got = (int(m.attrs["lora_rank"]), float(m.attrs["lora_alpha"]), m.attrs["lora_targets"])
    got = got[:2] + (got[2].decode() if isinstance(got[2], bytes) else got[2],)
    print(f"  {run}: lora_rank, lora_alpha, lora_targets = {got}")
    assert got == (4, 16.0, targets), got
    assert any(".lora_A." in n for n in m), f"{run}: no adapters"
PY

echo "--- eval takes the LoRA settings from the checkpoint"
run eval "$tiny" --data.dir=data --checkpoint base/checkpoints --json
base_loss=$(eval_loss)
run eval "$tiny" --data.dir=data --checkpoint lora/checkpoints --json
[[ $rc -eq 0 ]] || { cat err.log; fail "eval of the LoRA checkpoint without LoRA keys failed"; }
grep -qF "was trained with model.lora_rank=4, model.lora_alpha=16, model.lora_targets=c_attn" out.log ||
  fail "eval does not say it took the checkpoint's LoRA settings"
plain_loss=$(eval_loss)
run eval "$tiny" --data.dir=data --checkpoint lora/checkpoints --json --model.lora_rank=4 --model.lora_targets=c_attn
keyed_loss=$(eval_loss)
run eval "$tiny" --data.dir=data --checkpoint lora/checkpoints --json --model.lora_rank=8 --model.lora_targets=c_fc
grep -q "warning: .*was trained with model.lora_rank=4" err.log || fail "eval with other LoRA keys gives no warning"
other_loss=$(eval_loss)
echo "  val loss: base $base_loss, LoRA without keys $plain_loss, with its keys $keyed_loss, with other keys $other_loss"
[[ $plain_loss == "$keyed_loss" && $other_loss == "$keyed_loss" ]] || fail "eval of the LoRA checkpoint depends on the LoRA keys given"
[[ $plain_loss != "$base_loss" ]] || fail "eval of the LoRA checkpoint gave the base model's loss (adapters dropped)"

echo "--- resume and init_from compare the LoRA settings"
run train "$tiny" "${common[@]}" --train.steps=8 --output.dir=lora
expect_error "resume a LoRA run without LoRA" "holds LoRA adapters only" "this run has no LoRA adapters" \
  "set model.lora_rank=4, model.lora_alpha=16, model.lora_targets=c_attn (those of the run that wrote it)"
run train "$tiny" "${common[@]}" --train.steps=8 --output.dir=lora --model.lora_rank=4 --model.lora_alpha=8
expect_error "resume with another lora_alpha" "model.lora_alpha=16" "model.lora_alpha=8"
run train "$tiny" "${common[@]}" --train.steps=2 --output.dir=from_lora --checkpoint.init_from=lora/checkpoints
expect_error "init_from a LoRA checkpoint without LoRA" "holds LoRA adapters only" "this run has no LoRA adapters"
run train "$tiny" "${common[@]}" --train.steps=2 --output.dir=from_lora2 --checkpoint.init_from=lora/checkpoints \
  --model.lora_rank=4 --model.lora_targets=c_attn
[[ $rc -eq 0 ]] || { cat err.log; fail "init_from a LoRA checkpoint with its settings failed"; }
# The LoRA run continued from outside base/checkpoints into that directory with
# checkpoint.overwrite=true: the base its checkpoints name would be deleted. Refused, with
# base/checkpoints untouched.
before=$(ls -l --time-style=+%s.%N base/checkpoints)
run train "$tiny" "${common[@]}" --train.steps=8 --train.lr=2e-2 --train.min_lr=2e-2 --model.lora_rank=4 \
  --output.dir=base --checkpoint.resume=lora/checkpoints --checkpoint.overwrite=true
expect_error "overwrite the base of the resumed LoRA checkpoint" "the LoRA base " "/base/checkpoints/step_" \
  "of checkpoint.resume=lora/checkpoints is among the checkpoints in checkpoint.dir=base/checkpoints"
[[ $(ls -l --time-style=+%s.%N base/checkpoints) == "$before" ]] || fail "the refused overwrite changed base/checkpoints"

echo "--- exports and older checkpoints"
run convert --input lora/checkpoints --output lora_peft
[[ $rc -eq 0 ]] || { cat err.log; fail "convert of the LoRA checkpoint failed"; }
"$py" - <<'PY' || fail "the PEFT export lacks the adapters"
import json, struct
raw = open("lora_peft/adapter_model.safetensors", "rb").read()
names = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
adapters = [n for n in names if ".lora_" in n]
print(f"  PEFT export: {len(adapters)} adapter tensors of {len(names) - 1}")
assert len(adapters) == 4 and len(names) == 5, names  # A and B of c_attn in 2 blocks (+ __metadata__)
PY
run eval "$tiny" --data.dir=data --checkpoint lora_peft
expect_error "eval of a PEFT adapter directory" "no model.safetensors"
merged_equals_checkpoint "LoRA" lora/checkpoints lora_merged "$keyed_loss"
# A random base drawn with another model.init_std: the merge rebuilds that base (the merged
# export evaluates to the checkpoint's loss), and an eval under the default init_std is
# refused instead of scoring another base.
run train "$tiny" "${common[@]}" --train.steps=4 --train.lr=1e-2 --model.init_std=0.05 --model.lora_rank=4 --output.dir=lora_std
[[ $rc -eq 0 ]] || { cat err.log; fail "LoRA run with model.init_std=0.05 failed"; }
run eval lora_std/config.ini --checkpoint lora_std/checkpoints --json
std_loss=$(eval_loss)
merged_equals_checkpoint "LoRA, model.init_std=0.05" lora_std/checkpoints lora_std_merged "$std_loss"
grep -qF '"initializer_range":0.05,' lora_std_merged/config.json || fail "the merged export's initializer_range is not 0.05"
run eval "$tiny" --data.dir=data --checkpoint lora_std/checkpoints
expect_error "eval of a random-base LoRA checkpoint under another init_std" "with model.init_std=0.05, and this run has model.init_std=0.02" \
  "set model.init_std=0.05"
cp "$(ls lora/checkpoints/step_*.h5 | tail -1)" old.h5
"$py" -c 'import h5py; m = h5py.File("old.h5", "r+")["model"]; [m.attrs.__delitem__(k) for k in ("lora_rank", "lora_alpha", "lora_targets")]'
run eval "$tiny" --data.dir=data --checkpoint old.h5
expect_error "eval of a LoRA checkpoint without recorded settings" "holds LoRA adapters only" "set the model.lora_* settings"
finish "LoRA settings: recorded, taken by eval, compared by resume and init_from"
