#!/usr/bin/env bash
# tests/train/sampling_filter_cases.inc (test_sampling_filter's reference cases) is what
# sampling_filter_reference.py writes: a case added or changed by hand, or a change to the
# reference without regenerating the cases, makes them differ.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_SOURCE_DIR, REFERENCE_PYTHON, TEST_TMP.
set -uo pipefail
py=${REFERENCE_PYTHON:-/usr/bin/python3}
dir=$MESHTRAIN_SOURCE_DIR/tests/train
mkdir -p "$TEST_TMP"
"$py" "$dir/sampling_filter_reference.py" >"$TEST_TMP/sampling_filter_cases.inc" ||
  { echo "FAIL: sampling_filter_reference.py failed" >&2; exit 1; }
if ! diff -u "$dir/sampling_filter_cases.inc" "$TEST_TMP/sampling_filter_cases.inc" >&2; then
  echo "FAIL: tests/train/sampling_filter_cases.inc differs from what sampling_filter_reference.py writes" >&2
  echo "      (above: - committed, + generated); regenerate it:" >&2
  echo "      /usr/bin/python3 tests/train/sampling_filter_reference.py > tests/train/sampling_filter_cases.inc" >&2
  exit 1
fi
echo "sampling_filter_cases.inc is what sampling_filter_reference.py writes"
