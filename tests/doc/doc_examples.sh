#!/usr/bin/env bash
# CTest entry of doc_examples.py: every runnable shell block of README.md and doc/*.md.
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
exec "${REFERENCE_PYTHON:-/usr/bin/python3}" "$MESHTRAIN_SOURCE_DIR/tests/doc/doc_examples.py" \
  "$MESHTRAIN_SOURCE_DIR" "$MESHTRAIN_BIN" "$TEST_TMP"
