#!/usr/bin/env bash
# GGUF dequantisation (src/checkpoint/gguf_dequant.cpp) bitwise against the format's
# reference (gguf.quants.dequantize): one tensor of each supported type written with the
# gguf package, and tensors of each type in the real SmolLM2-135M-Instruct.Q4_1 file
# (Q8_0 embedding, Q4_1 projections, F32 norms). Packages from scripts/install-deps.sh.
# gguf_dequant_dump also runs the Kokkos kernel of a base kept in its GGUF blocks
# (kernels::dequantize_gguf, model.base_quant=gguf) on the same rows and fails unless it
# gives the same bits: the kernel is checked against the reference on the same tensors.
set -uo pipefail
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf
check="$MESHTRAIN_SOURCE_DIR/tests/checkpoint/gguf_dequant.py"
dump="$MESHTRAIN_BUILD_DIR/bin/gguf_dequant_dump"

kinds=(F32 F16 F16_SPECIAL BF16 Q8_0 Q4_0 Q4_1 Q4_K Q6_K)
"$py" "$check" write synthetic.gguf || fail "writing synthetic.gguf"
mkdir -p synthetic smollm
"$dump" synthetic.gguf synthetic "${kinds[@]}" && "$py" "$check" compare synthetic.gguf synthetic "${kinds[@]}" ||
  fail "synthetic tensors"
real=(token_embd.weight:2000 blk.0.attn_q.weight blk.0.attn_k.weight blk.29.ffn_down.weight blk.0.attn_norm.weight
      output_norm.weight)
"$dump" "$smollm" smollm "${real[@]}" && "$py" "$check" compare "$smollm" smollm "${real[@]}" ||
  fail "SmolLM2 tensors"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "GGUF dequantisation (formats/gguf_dequant and kernels::dequantize_gguf): bitwise equal to gguf.quants.dequantize"
