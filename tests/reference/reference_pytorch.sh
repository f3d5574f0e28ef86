#!/usr/bin/env bash
# meshtrain vs PyTorch on the same weights and batches (see torch_reference.py).
set -euo pipefail
family=${REFERENCE_FAMILY:?}
dir="$TEST_TMP"
rm -rf "$dir" && mkdir -p "$dir"
"$REFERENCE_DUMP" "$MESHTRAIN_SOURCE_DIR/inputs/tiny-$family.ini" "$dir" \
  --train.steps=10 --data.dir=random --train.global_batch=4 --train.micro_batch=2 --train.warmup_steps=3
"${REFERENCE_PYTHON:-/usr/bin/python3}" "$MESHTRAIN_SOURCE_DIR/tests/reference/torch_reference.py" "$dir"
