#!/usr/bin/env bash
# perf/paper_check.sh [OUT_DIR]: rerun the paper check of doc/perf.md ("Paper check: published
# runs against `plan`"): `meshtrain plan` for the published torchtitan and Megatron-LM runs
# (plan only: a few seconds in all, no training), the raw outputs (NAME.txt, NAME.json,
# NAME.terms.txt) and the comparison table (table.md, summary.json, commands.md) into OUT_DIR
# (default perf/results/paper_check). The published numbers and the target-cluster
# assumptions are in perf/paper_check.py.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=${1:-$ROOT/perf/results/paper_check}
"$PY" "$PERF_DIR/paper_check.py" "$MESHTRAIN" "$OUT"
