#!/usr/bin/env bash
# `convert --merge_lora` of a QLoRA checkpoint (issue 32): the merged weights are the base
# as the run held it -- dequantized NF4 -- plus (alpha / r) B A, as PEFT merges into a
# bitsandbytes 4-bit model. Checked against an independent computation: the base's
# safetensors quantized and dequantized by tests/formats/nf4_reference.py (numpy, QLoRA's
# code values; the codec test checks it against meshtrain byte for byte), the adapters
# from the PEFT export, the sum in float64. Projections with adapters: dequant(W) + scale B A;
# the other matrices (embeddings): dequant(W); 1-D tensors (norm weights): W unchanged. With
# model.base_quant_embeddings=false the embeddings and LM head were never quantized: W unchanged.
# The same for a base kept in its GGUF blocks (model.base_quant=gguf), against the gguf
# package's dequantization of the file.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
export PYTHONPATH="${MESHTRAIN_DEPS:-/opt/meshtrain-deps}/python${PYTHONPATH:+:$PYTHONPATH}"
export OPENBLAS_NUM_THREADS=1
py=${REFERENCE_PYTHON:-/usr/bin/python3}
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
run() {
  local name=$1
  shift
  timeout $((300 * time_scale)) "$@" >"$name.log" 2>&1 || { local rc=$?; cat "$name.log"; fail "$name: exit status $rc"; return 1; }
}
ini="$MESHTRAIN_SOURCE_DIR/inputs/tiny-llama.ini"
shape=(--model.d_model=192 --model.n_heads=3 --model.n_kv_heads=3 --model.ffn_dim=384)
lora=(--model.lora_rank=4 --model.lora_alpha=8 --model.lora_targets=q,k,v,o,gate,up,down)
common=(--data.dir=data --train.eval_every=0)
run prepare "$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes --output data || exit 1
run pre "$MESHTRAIN_BIN" train "$ini" "${shape[@]}" "${common[@]}" --train.steps=10 --output.dir=pre || exit 1
run base "$MESHTRAIN_BIN" convert --input pre/checkpoints --output base || exit 1
for embeddings in true false; do
run "qlora_$embeddings" "$MESHTRAIN_BIN" train "$ini" "${shape[@]}" "${common[@]}" "${lora[@]}" --model.base_quant=nf4 \
  --model.base_quant_embeddings="$embeddings" --train.steps=10 --train.lr=1e-2 --checkpoint.init_from=base \
  --output.dir="qlora_$embeddings" || exit 1
ck=$(ls "qlora_$embeddings"/checkpoints/step_*.h5 | tail -1)
rm -rf merged peft
run "merge_$embeddings" "$MESHTRAIN_BIN" convert --input "$ck" --output merged --merge_lora || exit 1
run "peft_$embeddings" "$MESHTRAIN_BIN" convert --input "$ck" --output peft || exit 1
"$py" - "$MESHTRAIN_SOURCE_DIR/tests/formats" "$embeddings" <<'PY' || fail "merged QLoRA export (base_quant_embeddings=$embeddings) != dequant(base) + scale B A"
import json, sys
import numpy as np
from safetensors.numpy import load_file
sys.path.insert(0, sys.argv[1])
quant_embeddings = sys.argv[2] == "true"
import nf4_reference  # the independent NF4 codec (QLoRA's code values, bitsandbytes' thresholds)

def nf4_dequant(w):
    """W as an NF4 base holds it: quantized per tensor in row-major 64-weight blocks (the
    tail padded with zeros), double-quantized scales per 256 blocks, dequantized."""
    flat = w.astype(np.float32).reshape(-1)
    padded = np.concatenate([flat, np.zeros((-len(flat)) % nf4_reference.BLOCK, np.float32)])
    return nf4_reference.quantize(padded)[3][:len(flat)].reshape(w.shape)

cfg = json.load(open("peft/adapter_config.json"))
scale = cfg["lora_alpha"] / cfg["r"]
adapters = load_file("peft/adapter_model.safetensors")
base, merged = load_file("base/model.safetensors"), load_file("merged/model.safetensors")
assert sorted(base) == sorted(merged), (sorted(base)[:4], sorted(merged)[:4])
counts = {"adapted": 0, "matrix": 0, "vector": 0, "kept": 0}
for name, w in base.items():
    got = merged[name].astype(np.float64)
    mod = name.rsplit(".weight", 1)[0]
    a_key = f"base_model.model.{mod}.lora_A.weight"
    if w.ndim == 1:
        assert np.array_equal(merged[name], w), f"{name}: a 1-D tensor changed"
        counts["vector"] += 1
        continue
    if not quant_embeddings and name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert np.array_equal(merged[name], w), f"{name}: changed, though base_quant_embeddings=false kept it unquantized"
        counts["kept"] += 1
        continue
    want = nf4_dequant(w).astype(np.float64)
    if a_key in adapters:
        B = adapters[f"base_model.model.{mod}.lora_B.weight"].astype(np.float64)
        A = adapters[a_key].astype(np.float64)
        assert np.abs(B).max() > 0, f"{mod}: B is zero, the adapter was not trained"
        want = want + scale * (B @ A)
        counts["adapted"] += 1
    else:
        counts["matrix"] += 1
    err = np.abs(got - want).max()
    assert np.allclose(got, want, rtol=1e-6, atol=1e-7), f"{name}: max difference {err:.3e}"
    # Not the unquantized base: the merge used the NF4 values.
    assert np.abs(got - (w.astype(np.float64) + (want - nf4_dequant(w)))).max() > 1e-4, f"{name}: merged into the fp32 base"
assert counts["adapted"] == 7 * 2, counts  # tiny-llama: 2 layers x 7 projections
assert (counts["matrix"], counts["kept"]) == ((2, 0) if quant_embeddings else (0, 2)), counts  # untied: embedding + head
print(f"QLoRA merge (base_quant_embeddings={sys.argv[2]}): {counts['adapted']} projections = dequant(base) + scale B A, "
      f"{counts['matrix']} other matrices = dequant(base), {counts['kept']} embedding / head unchanged, "
      f"{counts['vector']} 1-D tensors unchanged")
PY
done

# A base kept in its GGUF blocks (model.base_quant=gguf; tests/train/tiny_gguf.py: Q4_0, Q4_1,
# Q8_0, Q4_K, Q6_K, F16, BF16, F32 matrices): the merge goes into the file's dequantization,
# here gguf.quants.dequantize of each tensor (q/k rows put back in Hugging Face's order, as
# llama.cpp's converter permuted them), plus (alpha / r) B A in float64.
gg=(--model.vocab_pad_multiple=64 --train.micro_batch=1 --train.seq_len=32 --train.global_batch=2)
if run tiny_gguf "$py" "$MESHTRAIN_SOURCE_DIR/tests/train/tiny_gguf.py" tiny.gguf &&
   run gguf "$MESHTRAIN_BIN" train "${common[@]}" "${lora[@]}" "${gg[@]}" --model.base_quant=gguf --train.steps=6 \
     --train.lr=1e-2 --checkpoint.init_from=tiny.gguf --output.dir=gguf; then
  gck=$(ls gguf/checkpoints/step_*.h5 | tail -1)
  if run gmerge "$MESHTRAIN_BIN" convert --input "$gck" --output gmerged --merge_lora &&
     run gpeft "$MESHTRAIN_BIN" convert --input "$gck" --output gpeft; then
    grep -q "model.base_quant=gguf" gpeft/README.md || fail "the PEFT export's README does not name the gguf base"
    "$py" - <<'PY' || fail "merged gguf QLoRA export != dequant(GGUF) + scale B A"
import json
import numpy as np
import gguf
from gguf.quants import dequantize
from safetensors.numpy import load_file

r = gguf.GGUFReader("tiny.gguf")
H, KV, hd = 4, 2, 64
def w(name):
    t = next(t for t in r.tensors if t.name == name)
    return dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)]).astype(np.float32)
def unpermute(m, n_head):
    return m.reshape(n_head, hd // 2, 2, -1).swapaxes(1, 2).reshape(m.shape)
hf = {"model.embed_tokens.weight": w("token_embd.weight"), "model.norm.weight": w("output_norm.weight"),
      "lm_head.weight": w("output.weight")}
names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
         "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
for i in range(2):
    for h, g in names.items():
        x = w(f"blk.{i}.{g}.weight")
        if g in ("attn_q", "attn_k"):
            x = unpermute(x, H if g == "attn_q" else KV)
        hf[f"model.layers.{i}.{h}.weight"] = x
cfg = json.load(open("gpeft/adapter_config.json"))
scale = cfg["lora_alpha"] / cfg["r"]
adapters = load_file("gpeft/adapter_model.safetensors")
merged = load_file("gmerged/model.safetensors")
assert sorted(hf) == sorted(merged), (sorted(hf)[:4], sorted(merged)[:4])
adapted = 0
for name, base in hf.items():
    mod = name.rsplit(".weight", 1)[0]
    want = base.astype(np.float64)
    a_key = f"base_model.model.{mod}.lora_A.weight"
    if a_key in adapters:
        B = adapters[f"base_model.model.{mod}.lora_B.weight"].astype(np.float64)
        assert np.abs(B).max() > 0, f"{mod}: B is zero, the adapter was not trained"
        want = want + scale * (B @ adapters[a_key].astype(np.float64))
        adapted += 1
    got = merged[name].astype(np.float64)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    if a_key not in adapters:
        assert np.array_equal(merged[name], base), f"{name}: not the file's dequantized values"
    err = np.abs(got - want).max()
    assert np.allclose(got, want, rtol=1e-6, atol=1e-7), f"{name}: max difference {err:.3e}"
assert adapted == 7 * 2, adapted
print(f"gguf QLoRA merge: {adapted} projections = dequant(GGUF) + scale B A, the other {len(hf) - adapted} tensors the "
      f"file's dequantized values exactly")
PY
  fi
fi

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "qlora_merge: all checks passed"
