#!/usr/bin/env bash
# perf/bench_norms.sh end to end (timings are not checked), both sections, this build's
# bench_kernels against itself as the baseline (2 reps of norms, 1 of the slower epilogues): runs.csv has every kernel of every run,
# results.md a row per binary and pair (the kernel names the script pairs are the ones
# bench_kernels prints: a rename on one side fails here). And a bench_kernels that fails:
# exit 1, naming its log.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
bench=$(dirname "$MESHTRAIN_BIN")/bench_kernels
[[ -x $bench ]] || { fail "$bench is not built"; finish; }
# norms SECTION PAIRS REPS: bench_norms.sh with SECTION into ./SECTION; PAIRS: its rows per binary.
norms() {
  local section=$1 pairs=$2 reps=$3
  env PERF_MAX_LOAD=1000 MESHTRAIN="$MESHTRAIN_BIN" BENCH="$bench" BASELINE_BENCH="$bench" REPS="$reps" SECTION="$section" \
    timeout $((100 * time_scale)) bash "$MESHTRAIN_SOURCE_DIR/perf/bench_norms.sh" "$PWD/$section" >"$section.log" 2>&1
  local status=$?
  [[ $status == 0 ]] || { cat "$section.log"; fail "SECTION=$section: exit status $status"; return; }
  "$py" - "$section" "$pairs" "$reps" <<'PY' || { cat "$section.log"; fail "SECTION=$1: the tables are incomplete (above)"; }
import csv, sys
out, pairs, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = list(csv.DictReader(open(f"{out}/runs.csv")))
assert rows and all(r["ms"] and float(r["ms"]) > 0 for r in rows), rows
runs = {(r["binary"], r["rep"]) for r in rows}
assert runs == {(b, str(r)) for b in ("baseline", "candidate") for r in range(1, reps + 1)}, runs
table = [l for l in open(f"{out}/results.md") if l.startswith("| baseline |") or l.startswith("| candidate |")]
assert len(table) == 2 * pairs and all(l.rstrip().endswith(f"| {reps} |") for l in table), table
print(f"{out}: {len(rows)} timings from {len(runs)} runs, {len(table)} rows")
PY
}
echo "--- 1. SECTION=norms (4 pairs)"
norms norms 4 2
echo "--- 2. SECTION=epilogues (2 pairs)"
norms epilogues 2 1
echo "--- 3. a bench_kernels that fails"
printf '#!/usr/bin/env bash\necho "bench: out of luck"\nexit 4\n' >broken && chmod +x broken
env PERF_MAX_LOAD=1000 MESHTRAIN="$MESHTRAIN_BIN" BENCH="$PWD/broken" REPS=1 \
  timeout $((60 * time_scale)) bash "$MESHTRAIN_SOURCE_DIR/perf/bench_norms.sh" "$PWD/broken.out" >broken.log 2>&1
status=$?
if [[ $status != 1 ]] || ! grep -q "broken failed, see .*candidate-r1.txt" broken.log; then
  cat broken.log
  fail "a failing bench_kernels: status $status, want 1 and its log named"
fi
finish "perf/bench_norms.sh: both sections' tables complete against a baseline; a failing bench_kernels named"
