#!/usr/bin/env bash
# perf/compare_plans.sh (plan only, ~3 s a call): this build's binary against itself (exit 0,
# every case "identical"); against a wrapper whose GEMM rate is lower (exit 1, every case
# "DIFFERS", with the chosen mesh's step time and the candidates that predict differently);
# against a binary whose plan fails (exit 2, naming which binary and case, with its output).
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
cmp=$MESHTRAIN_SOURCE_DIR/perf/compare_plans.sh
# compare NAME OLD NEW: compare_plans.sh into ./NAME.out, its output in NAME.log, status in $status.
compare() {
  env PERF_MAX_LOAD=1000 MESHTRAIN="$MESHTRAIN_BIN" timeout $((60 * time_scale)) bash "$cmp" "$2" "$3" "$PWD/$1.out" \
    >"$1.log" 2>&1
  status=$?
}

echo "--- 1. the binary against itself"
compare same "$MESHTRAIN_BIN" "$MESHTRAIN_BIN"
if [[ $status != 0 ]] || [[ $(grep -c ': identical: ' same.log) != 4 ]]; then
  cat same.log
  fail "the same binary twice: status $status, want 0 and 4 cases identical"
fi

echo "--- 2. against a binary whose GEMMs are slower (--plan.gemm_tflops=600, the .ini's 700)"
printf '#!/usr/bin/env bash\nexec "%s" "$@" --plan.gemm_tflops=600\n' "$MESHTRAIN_BIN" >slower && chmod +x slower
compare slower "$MESHTRAIN_BIN" "$PWD/slower"
if [[ $status != 1 ]] || [[ $(grep -c ': DIFFERS: ' slower.log) != 4 ]] ||
  ! grep -q "^  chosen: .* vs " slower.log || ! grep -q "^  [0-9]* candidates predict differently" slower.log; then
  cat slower.log
  fail "a slower GEMM rate: status $status, want 1 and 4 cases DIFFERS with the chosen and the candidates named"
fi

echo "--- 3. against a binary whose plan fails"
printf '#!/usr/bin/env bash\necho "no plan today" >&2\nexit 3\n' >broken && chmod +x broken
compare broken "$MESHTRAIN_BIN" "$PWD/broken"
if [[ $status != 2 ]] || ! grep -q "the NEW binary's plan for 8 failed (exit status 3" broken.log ||
  ! grep -q "no plan today" broken.log; then
  cat broken.log
  fail "a failing plan: status $status, want 2, naming the NEW binary, the case and its output"
fi
finish "perf/compare_plans.sh: identical against itself, every difference named, a failing plan reported"
