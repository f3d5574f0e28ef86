#!/usr/bin/env bash
# Must-show 1 of issue 18: on every file under /usr/share/common-licenses and the fortunes
# corpus (/usr/share/games/fortunes, *.dat index files excepted), meshtrain's token ids equal
# the reference implementations' (Hugging Face tokenizers, sentencepiece) for the SmolLM2 GGUF
# and tokenizer.json files / SentencePiece models built by tokenizer_parity.py, and decoding
# gives the input back. References and the GGUF come from scripts/install-deps.sh.
set -uo pipefail
# shellcheck source=../support/smollm_reference.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/smollm_reference.sh" gguf tokenizers sentencepiece
mapfile -t files < <(find /usr/share/common-licenses /usr/share/games/fortunes -type f ! -name '*.dat' | sort)
if ((${#files[@]} < 20)); then
  echo "FAIL: the corpus is missing (Debian packages base-files and fortunes; run scripts/install-deps.sh)" >&2
  exit 1
fi
"$py" "$MESHTRAIN_SOURCE_DIR/tests/data/tokenizer_parity.py" "$MESHTRAIN_BIN" work "$smollm" "${files[@]}"
