#!/usr/bin/env bash
# NF4 with double-quantized scales (src/formats/nf4.cpp) byte for byte against an
# independent implementation (tests/formats/nf4_reference.py, numpy: QLoRA's code values and
# bitsandbytes' thresholds), on random weights built to hit every threshold and tie, and on
# real SmolLM2-135M-Instruct weights (the gguf package's float32 values of three tensors).
set -uo pipefail
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf numpy
ref="$MESHTRAIN_SOURCE_DIR/tests/formats/nf4_reference.py"
dump="$MESHTRAIN_BUILD_DIR/bin/nf4_dump"

"$py" "$ref" random random.f32 && "$dump" random.f32 random && "$py" "$ref" compare random.f32 random ||
  fail "random weights"
for t in blk.0.attn_q.weight blk.11.ffn_down.weight token_embd.weight; do
  "$py" "$ref" gguf "$smollm" "$t" "$t.f32" && "$dump" "$t.f32" "$t" && "$py" "$ref" compare "$t.f32" "$t" ||
    fail "SmolLM2 $t"
done
# A length that is not a multiple of the block is refused with one message.
head -c 400 random.f32 >short.f32
if "$dump" short.f32 short 2>short.err; then fail "100 weights were accepted"; fi
grep -q "not a multiple of the 64-weight block" short.err || fail "no clear message for 100 weights: $(cat short.err)"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "NF4: byte for byte equal to the reference"
