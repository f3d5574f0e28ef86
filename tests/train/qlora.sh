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
# slices split a block, base_quant_embeddings=false without base_quant. Then
# model.base_quant=gguf on a tiny GGUF (its own section below).
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
# The three bases told apart on the whole validation split (--batches 0): on 4 batches the
# blocks' quantization moved this barely pretrained base's loss by as little as 5.4e-7 (a
# signed sum that depends on the machine's BLAS; 2.7e-4 on all 38 windows).
for q in none nf4 nf4e; do
  case $q in none) args=() ;; nf4) args=("${lora[@]}" --model.base_quant=nf4) ;;
    nf4e) args=("${lora[@]}" --model.base_quant=nf4 --model.base_quant_embeddings=false) ;; esac
  "$MESHTRAIN_BIN" eval "$ini" "${shape[@]}" --data.dir=data --checkpoint base --batches 0 --json "${args[@]}" \
    > "eval_${q}_all.log" 2>&1 || { cat "eval_${q}_all.log"; exit 1; }
done
python3 - <<'PY'
import json
def last(path): return [json.loads(l) for l in open(path) if l.startswith("{")][-1]["loss"]
val = [json.loads(l) for l in open("nf4_lr0/metrics.jsonl") if "val_loss" in l][-1]["val_loss"]
q, n, c = last("eval_nf4.log"), last("eval_none.log"), last("eval_ckpt.log")
print(f"validation loss after a step at lr 0: {val!r}; eval of the nf4 base {q!r}, of the checkpoint {c!r}, "
      f"of the unquantized base {n!r}")
assert val == q == c, "the QLoRA model at start is not eval of the nf4 base"
val_e = [json.loads(l) for l in open("nf4e_lr0/metrics.jsonl") if "val_loss" in l][-1]["val_loss"]
qe, ce = last("eval_nf4e.log"), last("eval_ckpt_e.log")
print(f"embeddings and head unquantized: validation loss after a step at lr 0 {val_e!r}; eval of that base {qe!r}, "
      f"of the checkpoint {ce!r}")
assert val_e == qe == ce, "the QLoRA model (base_quant_embeddings=false) at start is not eval of its base"
qa, na, qea = last("eval_nf4_all.log"), last("eval_none_all.log"), last("eval_nf4e_all.log")
print(f"whole validation split: nf4 base {qa!r}, nf4 blocks only {qea!r}, unquantized {na!r}")
assert abs(qa - na) > 1e-5, "eval with model.base_quant=nf4 equals the unquantized base"
assert abs(qea - qa) > 1e-5 and abs(qea - na) > 1e-5, "base_quant_embeddings=false equals a fully quantized or unquantized base"
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

# ---- model.base_quant=gguf: a base kept in its GGUF file's own blocks -------------------------
# tests/train/tiny_gguf.py writes a Llama (d_model 256, 2 layers) whose matrices are Q4_0, Q4_1,
# Q8_0, Q4_K, Q6_K, F16, BF16 and F32, with 300 vocabulary rows of the 320 the model pads to.
# The same file loaded with base_quant=none is dequantized to fp32 at load, by the reference's
# arithmetic (formats/gguf_dequant, bitwise gguf.quants.dequantize); kept in its blocks it is
# dequantized unit by unit by kernels::dequantize_gguf: the runs must agree bit for bit, in
# losses and gradient norms, on 1 rank, on dp_shard=2 and 3 (K-quant blocks straddle shard
# boundaries there), on tp=2 (o_proj and down_proj split by columns into whole blocks), with
# no_shard on 2 ranks (the base dequantized once at load), and in bf16. The load holds no fp32
# matrix. Step 0 is eval of the base kept in its blocks; a checkpoint evaluates and resumes
# with the setting it records, and starts a run from it (init_from); `plan` predicts the frozen
# all-gather bytes exactly. Hostile: no LoRA, no GGUF base, a tp whose slices split a K-quant
# block, a type meshtrain does not read.
export PYTHONPATH="${MESHTRAIN_DEPS:-/opt/meshtrain-deps}/python${PYTHONPATH:+:$PYTHONPATH}"
py=${REFERENCE_PYTHON:-/usr/bin/python3}
for v in "" kquant_o q5_0; do "$py" "$MESHTRAIN_SOURCE_DIR/tests/train/tiny_gguf.py" "tiny${v:+_$v}.gguf" $v; done
gbatch=(--model.vocab_pad_multiple=64 --train.micro_batch=1 --train.seq_len=32 --train.global_batch=6)
gtune() {  # gtune NAME NP ARGS...: LoRA on tiny.gguf's base
  local name=$1 np=$2; shift 2
  # shellcheck disable=SC2086
  $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train --checkpoint.init_from="${INIT-tiny.gguf}" "${lora[@]}" "${gbatch[@]}" --data.dir=data \
    --train.steps="${STEPS-4}" --train.eval_every="${EVAL_EVERY-0}" --train.lr="${LR-5e-3}" --train.seed=7 \
    --parallel.strategy="${STRATEGY-full_shard}" --checkpoint.every=2 --output.dir="$name" "$@" > "$name.log" 2>&1 ||
    { cat "$name.log"; exit 1; }
}
same() {  # same A B LABEL [STEPS]: losses and gradient norms bit for bit
  python3 "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" "$1/metrics.jsonl" "$2/metrics.jsonl" --exact \
    --keys loss grad_norm --label "$3" ${4:+--steps "$4"}
}
for mesh in 1 dp2 dp3 tp2 noshard2; do
  STRATEGY=full_shard
  case $mesh in
    1) np=1 extra=() ;;
    dp2) np=2 extra=(--parallel.dp_shard=2) ;;
    dp3) np=3 extra=(--parallel.dp_shard=3) ;;
    tp2) np=2 extra=(--parallel.tp=2) ;;
    noshard2) np=2 extra=(--parallel.dp_shard=2) STRATEGY=no_shard ;;  # dequantized once, at load
  esac
  STRATEGY=$STRATEGY gtune "gnone_$mesh" "$np" "${extra[@]}"
  STRATEGY=$STRATEGY gtune "gguf_$mesh" "$np" --model.base_quant=gguf "${extra[@]}"
  same "gnone_$mesh" "gguf_$mesh" "gguf base vs its fp32 dequantization, $mesh"
  grep -q "^base_quant = gguf" "gguf_$mesh/config.ini" || { echo "gguf_$mesh: the setting is not recorded"; exit 1; }
done
# No fp32 copy of a matrix exists while a gguf base loads: the memory pool's peak over the
# load stays below the smallest frozen matrix in fp32 (k_proj, 128 x 256 x 4 bytes); the host
# side of the gguf load holds only one unit's shard of file bytes (checkpoint/load.cpp). The
# none load stages its fp32 values through scratch (workspace) 1 MiB at a time
# (parallel::kFrozenStagingElements), not a whole unit's shard (a block's is 2.3 MiB here;
# SmolLM2's embedding, 108 MiB, took the load above `plan` on one rank).
python3 - <<'PY'
import json
def summary(run): return json.load(open(f"{run}/summary.json"))
g, n, matrix, staging = summary("gguf_1"), summary("gnone_1"), 128 * 256 * 4, 4 << 18
gl, nl = g["load_peak_by_category"], n["load_peak_by_category"]
print(f"load: pool memory the load itself held at most {gl['total_in_use']:.0f} B (gguf: the norm weights) vs "
      f"{nl['total_in_use']:.0f} B (none: {nl['workspace']:.0f} B of scratch, at most {staging}); the smallest matrix "
      f"in fp32 {matrix} B; the shards at rest {g['peak_by_category']['params']:.0f} B vs "
      f"{n['peak_by_category']['params']:.0f} B")
assert gl["total_in_use"] < matrix, gl
assert 0 < nl["workspace"] <= staging, nl
assert g["peak_by_category"]["params"] < n["peak_by_category"]["params"] / 2, (g, n)
PY
# model.base_quant_embeddings=false: the outer unit loaded as the file's values in the compute
# dtype, the blocks' units kept in their blocks: bit for bit the none runs too.
for mesh in 1 dp2; do
  case $mesh in 1) np=1 extra=() ;; dp2) np=2 extra=(--parallel.dp_shard=2) ;; esac
  STRATEGY=full_shard gtune "gguf_emb_$mesh" "$np" --model.base_quant=gguf --model.base_quant_embeddings=false "${extra[@]}"
  same "gnone_$mesh" "gguf_emb_$mesh" "gguf base with base_quant_embeddings=false vs its fp32 dequantization, $mesh"
done
gtune gnone_bf16 1 --train.precision=bf16
gtune gguf_bf16 1 --train.precision=bf16 --model.base_quant=gguf
same gnone_bf16 gguf_bf16 "gguf base vs its fp32 dequantization, bf16"
# The frozen all-gather: what plan predicts is what the engine counted (metrics.jsonl).
for n in 2 3; do
  "$MESHTRAIN_BIN" plan --checkpoint.init_from=tiny.gguf "${lora[@]}" "${gbatch[@]}" --model.base_quant=gguf \
    --parallel.strategy=full_shard --parallel.dp_shard="$n" --plan.world_size="$n" > "plan_gguf_$n.txt" 2>&1 ||
    { cat "plan_gguf_$n.txt"; exit 1; }
  python3 - "plan_gguf_$n.txt" "gguf_dp$n/metrics.jsonl" <<'PY'
import json, re, sys
plan = open(sys.argv[1]).read()
m = re.search(r"^\s+full_shard\s+frozen\s+(\d+) B .*frozen_gather\s+(\d+) B", plan, re.M)
assert m and "Q4_K x 2" in plan, plan
got = {json.loads(l)["frozen_gather_bytes"] for l in open(sys.argv[2]) if "frozen_gather_bytes" in l}
print(f"{sys.argv[1]}: frozen all-gather planned {m.group(2)} B per step, measured {got}")
assert got == {float(m.group(2))}, (m.group(2), got)
PY
done
# Step 0 is the base kept in its blocks: one step at lr 0 leaves B = 0, and its validation
# loss equals eval of the GGUF with model.base_quant=gguf (and, the values being the same,
# without it); eval of a gguf checkpoint takes the setting from it and equals the none run's.
evalg=(eval --checkpoint tiny.gguf "${lora[@]}" "${gbatch[@]}" --data.dir=data --batches 4 --json)
STEPS=1 LR=0 EVAL_EVERY=1 gtune gguf_lr0 1 --model.base_quant=gguf --train.min_lr=0 --train.eval_batches=4
"$MESHTRAIN_BIN" "${evalg[@]}" --model.base_quant=gguf > eval_gguf.log 2>&1 || { cat eval_gguf.log; exit 1; }
"$MESHTRAIN_BIN" "${evalg[@]}" > eval_gnone.log 2>&1 || { cat eval_gnone.log; exit 1; }
for run in gguf_1 gnone_1; do
  "$MESHTRAIN_BIN" eval --checkpoint "$run/checkpoints" --data.dir=data --batches 4 --json > "eval_ckpt_$run.log" 2>&1 ||
    { cat "eval_ckpt_$run.log"; exit 1; }
done
grep -q "model.base_quant=gguf" eval_ckpt_gguf_1.log || { cat eval_ckpt_gguf_1.log; echo "eval did not take base_quant=gguf from the checkpoint"; exit 1; }
python3 - <<'PY'
import json
def last(path): return [json.loads(l) for l in open(path) if l.startswith("{")][-1]["loss"]
val = [json.loads(l) for l in open("gguf_lr0/metrics.jsonl") if "val_loss" in l][-1]["val_loss"]
g, n = last("eval_gguf.log"), last("eval_gnone.log")
cg, cn = last("eval_ckpt_gguf_1.log"), last("eval_ckpt_gnone_1.log")
print(f"gguf: validation loss after a step at lr 0 {val!r}; eval of the base in its blocks {g!r}, of its fp32 "
      f"dequantization {n!r}; eval of the step-4 checkpoints {cg!r} (gguf) and {cn!r} (none)")
assert val == g == n, "the gguf model at start is not eval of its base"
assert cg == cn, "eval of the gguf checkpoint differs from the none one's"
PY
# A resume from the step-2 checkpoint continues bit for bit (steps 3-4 as the whole run's).
ck2=$(ls gguf_1/checkpoints/step_*2.h5 | head -1)
gtune gguf_resumed 1 --model.base_quant=gguf --checkpoint.resume="$ck2"
grep -q "resumed from" gguf_resumed.log || { cat gguf_resumed.log; echo "gguf_resumed did not resume"; exit 1; }
same gguf_1 gguf_resumed "gguf resumed at step 2 vs uninterrupted" 3,4
# A LoRA checkpoint whose base is the GGUF is a gguf base too (checkpoint.init_from): its
# adapters and the file's blocks, as the none run's checkpoint gives its adapters and values.
# (A checkpoint brings no model shape as a GGUF does: the shape is given.)
tshape=(--model.family=llama --model.d_model=256 --model.n_layers=2 --model.n_heads=4 --model.n_kv_heads=2
  --model.ffn_dim=512 --model.vocab_size=300 --model.tie_embeddings=false)
STEPS=2 INIT=gguf_1/checkpoints gtune gguf_from_ckpt 1 --model.base_quant=gguf "${tshape[@]}"
STEPS=2 INIT=gnone_1/checkpoints gtune gnone_from_ckpt 1 "${tshape[@]}"
same gnone_from_ckpt gguf_from_ckpt "gguf vs none from a LoRA checkpoint of the GGUF"

gfail() {  # gfail NAME EXPECTED NP ARGS...: refused with exit 2 and the message; nothing written
  local name=$1 want=$2 np=$3; shift 3
  # shellcheck disable=SC2086
  refuse "$name" "$want" $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "${gbatch[@]}" --data.dir=data --train.steps=1 \
    --output.dir="$name" "$@"
  [[ ! -e $name ]] || { ls -laR "$name"; echo "$name: refused, but $name was written"; exit 1; }
}
gfail gguf_no_lora "model.base_quant=gguf quantizes the frozen base of a LoRA run, but model.lora_rank=0" 1 \
  --checkpoint.init_from=tiny.gguf --model.base_quant=gguf
gfail gguf_no_base "model.base_quant=gguf keeps the frozen base in the blocks of its GGUF file, but no base weights are given" 1 \
  "${lora[@]}" --model.family=llama --model.base_quant=gguf
gfail gguf_safetensors "checkpoint.init_from=base is neither a GGUF file nor a LoRA checkpoint whose base is one" 1 \
  "${lora[@]}" --checkpoint.init_from=base --model.base_quant=gguf
gfail gguf_split "model.layers.0.self_attn.o_proj.weight (256 x 256) is Q4_K in the base file" 2 \
  "${lora[@]}" --checkpoint.init_from=tiny_kquant_o.gguf --model.base_quant=gguf --parallel.tp=2
gfail gguf_q5_0 "tensor blk.0.ffn_gate.weight is Q5_0" 1 \
  "${lora[@]}" --checkpoint.init_from=tiny_q5_0.gguf --model.base_quant=gguf
echo "qlora: all checks passed"
