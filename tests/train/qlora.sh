#!/usr/bin/env bash
# QLoRA (issue 32, must-show 1 on a tiny Llama): LoRA adapters on a base kept in NF4 (and in
# int8), the base pretrained, exported to safetensors and loaded with checkpoint.init_from.
# The base's dimensions split into whole 64-weight blocks at tp=3 (d_model 192, 3 heads of
# 64, ffn 384), so the quantization is the same on every mesh: the losses of 1 rank,
# dp_shard=2 and tp=3 agree within the LoRA equivalence tolerances (tests/train/lora.sh),
# and they differ from the unquantized LoRA run's (the quantized base is what trains).
# The loss of the adapters at start (B = 0) is `eval` of the base kept in that quantization,
# and eval of a QLoRA checkpoint takes model.base_quant from it. The outer unit (embeddings,
# head) stays quantized through the step on every strategy: no_shard and shard_grad_op on 2
# ranks agree with 1 rank too. model.base_quant_embeddings=false (embeddings and head in the
# compute dtype): tp=3 agrees with 1 rank, its start is eval of that base (different from
# both quantized and unquantized), eval of its checkpoint takes the setting, a resume with
# the other value is refused. Hostile: base_quant without LoRA, an unknown word, a tp whose
# slices split a block, base_quant_embeddings=false without base_quant.
set -euo pipefail
ini="$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP"
export OPENBLAS_NUM_THREADS=1
shape=(--model.d_model=192 --model.n_heads=3 --model.n_kv_heads=3 --model.ffn_dim=384 --model.vocab_pad_multiple=3)
"$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes/fortunes --output data > /dev/null
"$MESHTRAIN_BIN" train "$ini" "${shape[@]}" --data.dir=data --train.steps=20 --train.eval_every=0 --train.lr=3e-3 \
  --output.dir=pre > pre.log 2>&1 || { cat pre.log; exit 1; }
"$MESHTRAIN_BIN" convert --input pre/checkpoints --output base > convert.log 2>&1 || { cat convert.log; exit 1; }
lora=(--model.lora_rank=4 --model.lora_alpha=8 --model.lora_targets=q,k,v,o,gate,up,down)
tune() {
  local name=$1 np=$2; shift 2
  # shellcheck disable=SC2086
  $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$ini" "${shape[@]}" "${lora[@]}" --data.dir=data --train.steps="${STEPS-8}" \
    --train.eval_every="${EVAL_EVERY-0}" --train.lr="${LR-5e-3}" --train.seed=7 --checkpoint.init_from=base --parallel.strategy="${STRATEGY-full_shard}" \
    --output.dir="$name" "$@" > "$name.log" 2>&1 || { cat "$name.log"; exit 1; }
}
compare() {  # compare REF CANDIDATE LABEL: the LoRA equivalence tolerances of lora.sh
  python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" "$1/metrics.jsonl" "$2/metrics.jsonl" \
    --rtol 1e-5 --keys loss --label "$3"
  python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" "$1/metrics.jsonl" "$2/metrics.jsonl" \
    --rtol 1e-4 --keys grad_norm --label "$3"
}
tune nf4_1 1 --model.base_quant=nf4 --checkpoint.every=8
tune nf4_dp2 2 --model.base_quant=nf4 --parallel.dp_shard=2
tune nf4_tp3 3 --model.base_quant=nf4 --parallel.tp=3
compare nf4_1 nf4_dp2 "QLoRA nf4 dp_shard=2 vs 1 rank"
compare nf4_1 nf4_tp3 "QLoRA nf4 tp=3 vs 1 rank"
STRATEGY=no_shard tune nf4_ns2 2 --model.base_quant=nf4
STRATEGY=shard_grad_op tune nf4_sgo2 2 --model.base_quant=nf4
compare nf4_1 nf4_ns2 "QLoRA nf4 no_shard on 2 ranks vs 1 rank"
compare nf4_1 nf4_sgo2 "QLoRA nf4 shard_grad_op on 2 ranks vs 1 rank"
# Embeddings and head unquantized: compared at lr 0 (8 steps, 8 batches: the forward and
# backward alone). Trained at lr 5e-3 these two runs drift apart from step 2 on (grad norm
# 1.6e-3 at step 3): one adapter element's step-1 gradient is about 1e-8, AdamW's eps, where
# the update is linear in g, and tp=3's other summation order moves it by 2.3e-4 (measured
# in the step-1 checkpoints; nf4's worst element moves 5.6e-6) -- the optimizer amplifying
# rounding, not the model: at lr 0 every step agrees within 1e-7.
LR=0 tune nf4e_1 1 --model.base_quant=nf4 --model.base_quant_embeddings=false --train.min_lr=0 --checkpoint.every=8
LR=0 tune nf4e_tp3 3 --model.base_quant=nf4 --model.base_quant_embeddings=false --parallel.tp=3 --train.min_lr=0
compare nf4e_1 nf4e_tp3 "QLoRA nf4, embeddings and head unquantized, tp=3 vs 1 rank (lr 0)"
tune int8_1 1 --model.base_quant=int8
tune int8_tp3 3 --model.base_quant=int8 --parallel.tp=3
compare int8_1 int8_tp3 "QLoRA int8 tp=3 vs 1 rank"
tune lora_1 1
# The quantized base changes the model: the losses differ from LoRA's by far more than the
# mesh tolerance (nf4 more than int8).
python3 - <<'PY'
import json
def losses(run): return [json.loads(l)["loss"] for l in open(f"{run}/metrics.jsonl")]
ref = losses("lora_1")
for run in ["nf4_1", "int8_1"]:
    d = max(abs(a - b) / abs(b) for a, b in zip(losses(run), ref))
    print(f"{run} vs unquantized LoRA: largest relative loss difference {d:.2e}")
    assert d > 1e-4, f"{run}: the losses equal the unquantized LoRA run's within {d:.1e}: the base was not quantized"
dn = max(abs(a - b) for a, b in zip(losses("nf4_1"), ref))
di = max(abs(a - b) for a, b in zip(losses("int8_1"), ref))
assert dn > di, f"nf4 ({dn:.2e}) should move the loss more than int8 ({di:.2e})"
PY
# The adapters' loss at start is the quantized base's: one step at lr 0 leaves B = 0, and the
# validation loss after it equals eval of the base with model.base_quant (and not without).
evalbase=(eval "$ini" "${shape[@]}" --data.dir=data --checkpoint base --batches 4 --json)
STEPS=1 LR=0 EVAL_EVERY=1 tune nf4_lr0 1 --model.base_quant=nf4 --train.min_lr=0 --train.eval_batches=4
"$MESHTRAIN_BIN" "${evalbase[@]}" "${lora[@]}" --model.base_quant=nf4 > eval_nf4.log 2>&1 || { cat eval_nf4.log; exit 1; }
"$MESHTRAIN_BIN" "${evalbase[@]}" > eval_none.log 2>&1 || { cat eval_none.log; exit 1; }
STEPS=1 LR=0 EVAL_EVERY=1 tune nf4e_lr0 1 --model.base_quant=nf4 --model.base_quant_embeddings=false --train.min_lr=0 \
  --train.eval_batches=4
"$MESHTRAIN_BIN" "${evalbase[@]}" "${lora[@]}" --model.base_quant=nf4 --model.base_quant_embeddings=false > eval_nf4e.log 2>&1 ||
  { cat eval_nf4e.log; exit 1; }
"$MESHTRAIN_BIN" eval "$ini" "${shape[@]}" --data.dir=data --checkpoint nf4e_lr0/checkpoints --batches 4 --json \
  > eval_ckpt_e.log 2>&1 || { cat eval_ckpt_e.log; exit 1; }
grep -q "model.base_quant_embeddings=false" eval_ckpt_e.log ||
  { cat eval_ckpt_e.log; echo "eval did not take base_quant_embeddings from the checkpoint"; exit 1; }
# eval of the QLoRA checkpoint: base_quant from /model (no model.base_quant given).
"$MESHTRAIN_BIN" eval "$ini" "${shape[@]}" --data.dir=data --checkpoint nf4_lr0/checkpoints --batches 4 --json \
  > eval_ckpt.log 2>&1 || { cat eval_ckpt.log; exit 1; }
grep -q "model.base_quant=nf4" eval_ckpt.log || { cat eval_ckpt.log; echo "eval did not take base_quant from the checkpoint"; exit 1; }
python3 - <<'PY'
import json
def last(path): return [json.loads(l) for l in open(path) if l.startswith("{")][-1]["loss"]
val = [json.loads(l) for l in open("nf4_lr0/metrics.jsonl") if "val_loss" in l][-1]["val_loss"]
q, n, c = last("eval_nf4.log"), last("eval_none.log"), last("eval_ckpt.log")
print(f"validation loss after a step at lr 0: {val!r}; eval of the nf4 base {q!r}, of the checkpoint {c!r}, "
      f"of the unquantized base {n!r}")
assert val == q == c, "the QLoRA model at start is not eval of the nf4 base"
assert abs(q - n) > 1e-5, "eval with model.base_quant=nf4 equals the unquantized base"
val_e = [json.loads(l) for l in open("nf4e_lr0/metrics.jsonl") if "val_loss" in l][-1]["val_loss"]
qe, ce = last("eval_nf4e.log"), last("eval_ckpt_e.log")
print(f"embeddings and head unquantized: validation loss after a step at lr 0 {val_e!r}; eval of that base {qe!r}, "
      f"of the checkpoint {ce!r}")
assert val_e == qe == ce, "the QLoRA model (base_quant_embeddings=false) at start is not eval of its base"
assert abs(qe - q) > 1e-6 and abs(qe - n) > 1e-6, "base_quant_embeddings=false equals a fully quantized or unquantized base"
PY
# Hostile: one clear error each (exit 2), nothing trained.
refuse() {  # refuse NAME EXPECTED ARGS...: exit status 2 and the message
  local name=$1 want=$2 rc; shift 2
  set +e
  "$@" > "$name.log" 2>&1
  rc=$?
  set -e
  [[ $rc == 2 ]] && grep -qF -- "$want" "$name.log" || { cat "$name.log"; echo "$name: expected exit 2 with: $want (got $rc)"; exit 1; }
  echo "$name: $(grep -F -- "$want" "$name.log" | head -1 | cut -c1-200)"
}
refuse no_lora "model.base_quant=nf4 quantizes the frozen base of a LoRA run, but model.lora_rank=0" \
  "$MESHTRAIN_BIN" train "$ini" --data.dir=data --train.steps=1 --model.base_quant=nf4 --output.dir=no_lora
refuse unknown "model.base_quant" \
  "$MESHTRAIN_BIN" train "$ini" --data.dir=data --train.steps=1 "${lora[@]}" --model.base_quant=nf5 --output.dir=unknown
grep -q "none, nf4, int8" unknown.log || { cat unknown.log; echo "the unknown word's error does not list the choices"; exit 1; }
# tiny-llama's d_model 64 at tp=2: o_proj's slices are 32 columns, half a block.
# shellcheck disable=SC2086
refuse split_block "model.layers.0.self_attn.o_proj.weight (64 x 64) does not split into whole 64-weight blocks at parallel.tp=2" \
  $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "$ini" --data.dir=data --train.steps=1 "${lora[@]}" --model.base_quant=nf4 \
  --parallel.tp=2 --output.dir=split_block
[[ ! -e split_block/checkpoints ]] || ! ls split_block/checkpoints/step_* > /dev/null 2>&1 || { echo "a checkpoint was written"; exit 1; }
refuse embeddings_no_quant "model.base_quant_embeddings=false keeps the embeddings and LM head of a quantized base in the compute dtype, but model.base_quant=none" \
  "$MESHTRAIN_BIN" train "$ini" --data.dir=data --train.steps=1 "${lora[@]}" --model.base_quant_embeddings=false \
  --output.dir=embeddings_no_quant
# A resume of nf4e_1 (step 8) with the embeddings quantized: another model.
refuse resume_embeddings "LoRA: model.lora_rank=4, model.lora_alpha=8, model.lora_targets=q,k,v,o,gate,up,down, model.base_quant=nf4, model.base_quant_embeddings=false in the checkpoint" \
  "$MESHTRAIN_BIN" train "$ini" "${shape[@]}" "${lora[@]}" --data.dir=data --train.steps=10 --train.eval_every=0 \
  --checkpoint.init_from=base --model.base_quant=nf4 --output.dir=nf4e_1
echo "qlora: all checks passed"
