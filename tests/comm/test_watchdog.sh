#!/usr/bin/env bash
# Collective watchdog: when one rank never enters a collective, the ranks waiting in it
# must abort the whole job within parallel.collective_timeout, with a non-zero exit
# status and one message that names the collective, the group and the absent rank.
# Runs tests/comm/watchdog_helper (a test-only program) under mpirun.
#
# Environment (set by meshtrain_add_script_test): MPIEXEC, MESHTRAIN_BUILD_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"

helper="$MESHTRAIN_BUILD_DIR/bin/watchdog_helper"
timeout_s=3
mkdir -p "$TEST_TMP"
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# run_case SCENARIO NP ABSENT_RANK GROUP
run_case() {
  local scenario=$1 np=$2 absent=$3 group=$4
  local out="$TEST_TMP/$scenario.out" err="$TEST_TMP/$scenario.err"
  echo "--- scenario '$scenario' on $np ranks: rank $absent skips all_reduce #2 of the '$group' group"
  local start=$SECONDS
  # The helper's idle ranks sleep 60 s: an abort that only happens after that means the
  # watchdog did not fire (so the 45 s bound below is not scaled: it must stay under 60 s);
  # 120 s (times time_scale) means the job hung.
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  timeout $((120 * time_scale)) $MPIEXEC -np "$np" "$helper" "$scenario" "$timeout_s" >"$out" 2>"$err"
  local rc=$? elapsed=$((SECONDS - start))
  sed 's/^/  stderr: /' "$err"
  echo "  exit status $rc after ${elapsed} s"
  [[ $rc -ne 0 ]] || fail "$scenario: the job exited with status 0"
  [[ $rc -ne 124 ]] || fail "$scenario: the job hung (killed by timeout after $((120 * time_scale)) s)"
  [[ $rc -eq 124 || $rc -eq 76 ]] || fail "$scenario: exit status $rc, expected 76 (peers lost, doc/batch.md)"
  (( elapsed < 45 )) || fail "$scenario: the abort took ${elapsed} s (collective_timeout=${timeout_s} s)"
  local expect="collective watchdog: all_reduce #2 on the '$group' group did not complete within parallel.collective_timeout=$timeout_s s: rank(s) $absent did not arrive"
  grep -qF "$expect" "$err" || fail "$scenario: stderr lacks the message: $expect"
  grep -q "aborting the job" "$err" || fail "$scenario: stderr lacks 'aborting the job'"
  if grep -q "completed without" "$err"; then fail "$scenario: the collective completed without the absent rank"; fi
}

run_case world 2 1 world
run_case tp 4 3 tp

if (( failures )); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "watchdog: all checks passed"
