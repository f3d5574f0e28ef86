#!/usr/bin/env bash
# The paper check of doc/perf.md stays true to the code: perf/paper_check.py reruns `plan` for
# the published torchtitan and Megatron-LM configurations (every cost input given, so nothing
# is measured and the output is deterministic) and its table must equal the committed
# perf/results/paper_check/table.md and the one in doc/perf.md. It fails when a plan key the
# script passes is renamed or removed, when plan's output format changes under the script's
# parser, and when the cost model's predictions change without the page being regenerated.
# Environment (set by meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -euo pipefail
src=$MESHTRAIN_SOURCE_DIR
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
# Through perf/paper_check.sh (the script the fix below names; it runs perf/paper_check.py).
MESHTRAIN="$MESHTRAIN_BIN" bash "$src/perf/paper_check.sh" "$TEST_TMP/out" > "$TEST_TMP/stdout.txt"
fix="rerun perf/paper_check.sh, commit perf/results/paper_check/, paste its table.md into doc/perf.md (\"Paper check\") and check the paragraphs under it"
if ! diff "$src/perf/results/paper_check/table.md" "$TEST_TMP/out/table.md"; then
  echo "FAIL: plan's predictions for the published runs changed (diff above: committed < > now); $fix"
  exit 1
fi
/usr/bin/python3 - "$src/doc/perf.md" "$TEST_TMP/out/table.md" <<'PY' || { echo "FAIL: doc/perf.md does not hold the current paper-check table; $fix"; exit 1; }
import sys
doc, table = (open(p).read() for p in sys.argv[1:3])
sys.exit(0 if table.strip() in doc else 1)
PY
echo "paper check: $(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$TEST_TMP/out/summary.json") configurations regenerated, identical to perf/results/paper_check and doc/perf.md"
