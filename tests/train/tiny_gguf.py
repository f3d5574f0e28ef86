#!/usr/bin/env python3
"""A tiny Llama in a GGUF file whose matrices use every block type meshtrain keeps with
model.base_quant=gguf, for the QLoRA tests (tests/train/qlora.sh, tests/checkpoint/
qlora_merge.sh). Written with the `gguf` package (scripts/install-deps.sh).

  tiny_gguf.py OUT.gguf [VARIANT]

d_model 256, 2 layers, 4 heads of 64 (2 kv heads), ffn 512, a vocabulary of 300 rows (a
model padded to a multiple of 64 gets 20 zero rows), untied head, F32 norm weights.
Matrices (random weights; Q8_0/Q4_0/Q4_1/F16/BF16/F32 quantized from normal values by
gguf.quants.quantize, Q4_K and Q6_K random blocks with small finite scales, as the
package cannot quantize those):
  token_embd Q8_0, output Q6_K; per layer attn_q Q4_K, attn_k Q6_K, attn_v Q8_0,
  attn_output Q4_1, ffn_gate Q4_0, ffn_up F16 (layer 1: F32), ffn_down Q6_K (layer 1: BF16).
VARIANT:
  (none)        as above: splits into whole blocks at tp 1 and 2
  kquant_o      attn_output in Q4_K: at tp 2 each rank holds 128 of its 256 columns, half a block
  q5_0          ffn_gate of layer 0 in Q5_0, a type meshtrain does not read
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

C, L, H, KV, F, V = 256, 2, 4, 2, 512, 300


def kquant_blocks(rng, qt, rows, cols):
    block_bytes = gguf.GGML_QUANT_SIZES[qt][1]
    raw = rng.integers(0, 256, size=(rows, cols // 256, block_bytes), dtype=np.uint8)
    scale = 1e-4 if qt == T.Q4_K else 2e-5
    halves = (np.abs(rng.standard_normal((rows, cols // 256, 2))) * scale + scale / 4).astype(np.float16)
    halves = halves.view(np.uint8).reshape(rows, cols // 256, 4)
    if qt == T.Q4_K:
        raw[..., 0:4] = halves  # d, dmin
    else:
        raw[..., block_bytes - 2:] = halves[..., :2]  # d
    return raw.reshape(rows, -1)


def main():
    out = sys.argv[1]
    variant = sys.argv[2] if len(sys.argv) > 2 else ""
    rng = np.random.default_rng(32)
    w = gguf.GGUFWriter(out, "llama")
    w.add_context_length(64)
    w.add_embedding_length(C)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)

    def add(name, qt, rows, cols):
        if qt in (T.Q4_K, T.Q6_K):
            w.add_tensor(name, kquant_blocks(rng, qt, rows, cols), raw_dtype=qt)
            return
        x = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        if qt == T.F32:
            w.add_tensor(name, x)
        elif qt == T.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, quantize(x, qt), raw_dtype=qt)

    add("token_embd.weight", T.Q8_0, V, C)
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(C)).astype(np.float32))
    add("output.weight", T.Q6_K, V, C)
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(C)).astype(np.float32))
        w.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(C)).astype(np.float32))
        add(p + "attn_q.weight", T.Q4_K, H * 64, C)
        add(p + "attn_k.weight", T.Q6_K, KV * 64, C)
        add(p + "attn_v.weight", T.Q8_0, KV * 64, C)
        add(p + "attn_output.weight", T.Q4_K if variant == "kquant_o" else T.Q4_1, C, H * 64)
        add(p + "ffn_gate.weight", T.Q5_0 if variant == "q5_0" and i == 0 else T.Q4_0, F, C)
        add(p + "ffn_up.weight", T.F16 if i == 0 else T.F32, F, C)
        add(p + "ffn_down.weight", T.Q6_K if i == 0 else T.BF16, C, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
