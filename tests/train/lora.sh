#!/usr/bin/env bash
# LoRA fine-tuning, end to end: pretrain a tiny model, export it to safetensors, fine-tune
# LoRA adapters from it on 1, 2 (tp=2) and 4 (dp_shard=2 x tp=2) ranks; the losses agree,
# the loss falls, the adapters moved, and the checkpoints hold the adapters and their
# moments only, with a reference to the base. Resuming from a mid-run checkpoint reloads
# the base through that reference and continues bitwise like the uninterrupted run (also
# for a random base, recomputed from its seed); a base that moved or changed, and a run
# without the LoRA settings, are one clear error each.
set -euo pipefail
family=${LORA_FAMILY:?}
ini="$MESHTRAIN_SOURCE_DIR/inputs/tiny-$family.ini"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP"
"$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes --output data > /dev/null
"$MESHTRAIN_BIN" train "$ini" --data.dir=data --train.steps=30 --train.eval_every=0 --output.dir=pre > pre.log 2>&1 \
  || { cat pre.log; exit 1; }
"$MESHTRAIN_BIN" convert --input pre/checkpoints --output base > convert.log 2>&1 || { cat convert.log; exit 1; }
targets=$([[ $family == gpt2 ]] && echo "c_attn,attn.c_proj,c_fc,mlp.c_proj" || echo "q,k,v,o,gate,up,down")
tune() {
  local name=$1 np=$2; shift 2
  # shellcheck disable=SC2086
  $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$ini" --data.dir=data --train.steps="${STEPS-40}" --train.eval_every=0 \
    --train.lr=5e-3 --train.seed=7 --checkpoint.init_from="${INIT_FROM-base}" --model.lora_rank=4 --model.lora_alpha=8 \
    --model.lora_targets="$targets" --parallel.strategy=full_shard --output.dir="$name" "$@" > "$name.log" 2>&1 \
    || { cat "$name.log"; exit 1; }
}
tune lora1 1 --checkpoint.every=20
tune lora_tp2 2 --parallel.tp=2
tune lora_dp2tp2 4 --parallel.tp=2 --parallel.dp_shard=2
for run in lora_tp2 lora_dp2tp2; do
  python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" lora1/metrics.jsonl $run/metrics.jsonl \
    --rtol 1e-5 --keys loss --label "$family LoRA $run vs 1 rank"
  # Adapter gradients start near zero (B = 0), so their norm is a sum of tiny, differently
  # ordered terms: 1e-4 relative.
  python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" lora1/metrics.jsonl $run/metrics.jsonl \
    --rtol 1e-4 --keys grad_norm --label "$family LoRA $run vs 1 rank"
done
# Resume at step 20 of the 1-rank run: the base comes back through the reference.
tune resumed 1 --checkpoint.resume="$TEST_TMP/lora1/checkpoints/step_00000020.h5"
grep -q "resumed from" resumed.log || { cat resumed.log; echo "the run did not resume"; exit 1; }
python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" lora1/metrics.jsonl resumed/metrics.jsonl \
  --exact --keys loss grad_norm --steps 21,40 --label "$family LoRA resumed at step 20 vs uninterrupted"
"${REFERENCE_PYTHON:-/usr/bin/python3}" - "$TEST_TMP/base" <<'PY'
import glob, json, os, sys
import h5py, numpy as np
base_dir = sys.argv[1]
for run in ["lora1", "lora_dp2tp2"]:
    f = h5py.File(sorted(glob.glob(f"{run}/checkpoints/step_*.h5"))[-1], "r")
    names = []
    f["model"].visit(lambda n: names.append(n) if isinstance(f["model"][n], h5py.Dataset) else None)
    base = [n for n in names if ".lora_" not in n]
    lora_b = [n for n in names if ".lora_B." in n]
    assert lora_b, "no LoRA adapters in the checkpoint"
    assert not base, f"{run}: the checkpoint holds base weights {base[:3]}"
    moments = []
    f["optim/exp_avg"].visit(lambda n: moments.append(n) if isinstance(f["optim/exp_avg"][n], h5py.Dataset) else None)
    assert moments and all(".lora_" in n for n in moments), f"{run}: moments of non-adapters {moments[:3]}"
    ref = f.attrs["base_weights"]
    ref = ref.decode() if isinstance(ref, bytes) else str(ref)
    assert os.path.samefile(ref, base_dir), f"{run}: base reference {ref}, expected {base_dir}"
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(base_dir, "*.safetensors")))
    assert int(f.attrs["base_weights_bytes"]) == size, f"{run}: base size {f.attrs['base_weights_bytes']} != {size}"
    moved = max(float(np.abs(f["model"][n][...]).max()) for n in lora_b)
    assert moved > 0, f"{run}: LoRA B stayed zero"
    print(f"{run}: adapters only ({len(names)} tensors), base {ref}, {len(lora_b)} B adapters moved (max |B| {moved:.3g})")
# Validation loss on the same windows: the base model (= the LoRA model at start, B = 0)
# against the fine-tuned one.
base_val = json.loads(open("pre/metrics.jsonl").readlines()[-1])["val_loss"]
tuned_val = json.loads(open("lora1/metrics.jsonl").readlines()[-1])["val_loss"]
print(f"validation loss: base {base_val:.4f}, after LoRA fine-tuning {tuned_val:.4f}")
assert tuned_val < base_val, "LoRA fine-tuning did not reduce the validation loss"
PY
# The base moved: resuming names it and exits 2 without writing anything.
mv base base_moved
set +e
"$MESHTRAIN_BIN" train "$ini" --data.dir=data --train.steps=40 --train.eval_every=0 --model.lora_rank=4 \
  --model.lora_alpha=8 --model.lora_targets="$targets" --output.dir=moved \
  --checkpoint.resume="$TEST_TMP/lora1/checkpoints/step_00000020.h5" > moved.log 2>&1
rc=$?
set -e
mv base_moved base
[[ $rc == 2 ]] || { cat moved.log; echo "expected exit 2 for a moved base, got $rc"; exit 1; }
grep -q "its base weights $TEST_TMP/base no longer exist" moved.log || { cat moved.log; echo "no clear error"; exit 1; }
[[ ! -e moved/checkpoints ]] || ! ls moved/checkpoints/step_* > /dev/null 2>&1 || { echo "a checkpoint was written"; exit 1; }
echo "moved base: $(grep -o 'its base weights.*' moved.log | head -1)"
# Without init_from the base is the initialisation from train.seed: the checkpoint records
# the seed, and a resume recomputes the base and continues bitwise.
INIT_FROM= STEPS=8 tune rand 1 --checkpoint.every=4
INIT_FROM= STEPS=8 tune rand_resumed 1 --checkpoint.resume="$TEST_TMP/rand/checkpoints/step_00000004.h5"
python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" rand/metrics.jsonl rand_resumed/metrics.jsonl \
  --exact --keys loss grad_norm --steps 5,8 --label "$family LoRA on a random base, resumed at step 4"
# A training run without the LoRA settings cannot resume an adapters-only checkpoint: one
# clear error. eval takes the settings from the checkpoint and reads its base.
set +e
"$MESHTRAIN_BIN" train "$ini" --data.dir=data --train.steps=40 --train.eval_every=0 --output.dir=nolora \
  --checkpoint.resume="$TEST_TMP/lora1/checkpoints/step_00000020.h5" > train_nolora.log 2>&1
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "holds LoRA adapters only (base weights: $TEST_TMP/base), but this run has no LoRA adapters: set model.lora_rank=4, model.lora_alpha=" \
  train_nolora.log || { cat train_nolora.log; echo "expected the no-LoRA-settings error naming the checkpoint's settings, rc $rc"; exit 1; }
"$MESHTRAIN_BIN" eval "$ini" --data.dir=data --checkpoint lora1/checkpoints > eval_nolora.log 2>&1 &&
  grep -q "was trained with model.lora_rank=4" eval_nolora.log ||
  { cat eval_nolora.log; echo "eval without the LoRA keys did not take the checkpoint's settings"; exit 1; }
# The base changed (here only its modification time): the same kind of error.
touch -d '2001-01-01 00:00:00' base/*.safetensors
set +e
"$MESHTRAIN_BIN" train "$ini" --data.dir=data --train.steps=40 --train.eval_every=0 --model.lora_rank=4 \
  --model.lora_alpha=8 --model.lora_targets="$targets" --output.dir=changed \
  --checkpoint.resume="$TEST_TMP/lora1/checkpoints/step_00000020.h5" > changed.log 2>&1
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "its base weights $TEST_TMP/base changed since it was written" changed.log \
  || { cat changed.log; echo "expected the changed-base error, rc $rc"; exit 1; }
# ... with the two modification times as dates, not as raw nanoseconds.
grep -qE "modified [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{9} UTC then, .* modified [0-9]{4}-.* UTC now" \
  changed.log || { cat changed.log; echo "the changed-base error does not give the times as dates"; exit 1; }
# An adapters-only checkpoint exports as a PEFT adapter without its base (adapter_config.json
# names the base path) ...
"$MESHTRAIN_BIN" convert --input lora1/checkpoints --output lora_peft > convert_peft.log 2>&1 \
  || { cat convert_peft.log; echo "PEFT export of an adapters-only checkpoint failed"; exit 1; }
"${REFERENCE_PYTHON:-/usr/bin/python3}" - "$TEST_TMP" <<'PY'
import json, os, struct, sys
cfg = json.load(open("lora_peft/adapter_config.json"))
assert os.path.samefile(cfg["base_model_name_or_path"], os.path.join(sys.argv[1], "base")), cfg
with open("lora_peft/adapter_model.safetensors", "rb") as f:  # the header: u64 length, JSON
    names = [n for n in json.loads(f.read(struct.unpack("<Q", f.read(8))[0])) if n != "__metadata__"]
assert names and all(".lora_A." in n or ".lora_B." in n for n in names), names
print(f"PEFT export: {len(names)} adapter tensors, base {cfg['base_model_name_or_path']}")
PY
# ... while merging reads the base through the reference: the changed base is the same
# one error as on resume, and nothing is written.
set +e
"$MESHTRAIN_BIN" convert --input lora1/checkpoints --output lora_merged --merge_lora > convert_merge.log 2>&1
rc=$?
set -e
[[ $rc == 2 && ! -e lora_merged ]] && grep -q "its base weights $TEST_TMP/base changed since it was written" \
  convert_merge.log || { cat convert_merge.log; echo "expected the changed-base error from --merge_lora, rc $rc"; exit 1; }
