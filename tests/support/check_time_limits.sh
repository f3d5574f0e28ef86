#!/usr/bin/env bash
# Every time limit a test script sets itself is scaled by the sanitizer presets' factor
# (tests/support/time_limits.sh): no `timeout N` with a bare number outside a comment, and a
# script that uses time_scale sources time_limits.sh itself (so it holds however the script
# is reached). A new script that forgets either fails here, by file and line, not later as a
# sanitizer run's spurious time-out.
# Environment (meshtrain_add_script_test): MESHTRAIN_SOURCE_DIR.
set -uo pipefail
cd "$MESHTRAIN_SOURCE_DIR/tests" || exit 1
failures=0
mapfile -t scripts < <(find . -name '*.sh' -type f | sort)
((${#scripts[@]} > 40)) || { echo "FAIL: only ${#scripts[@]} scripts found under tests/"; exit 1; }
# Comment lines (leading #) are left out; `timeout -k 5 $((120 * time_scale))` is scaled.
unscaled=$(grep -nE '\btimeout (-[ks] [0-9A-Z]+ )*[0-9]' "${scripts[@]}" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*#')
if [[ -n $unscaled ]]; then
  echo "FAIL: unscaled time limits (write \$((N * time_scale)); tests/support/time_limits.sh):"
  # shellcheck disable=SC2001  # indents every line
  echo "$unscaled" | sed 's/^/  /'
  failures=$((failures + 1))
fi
# A test may source it through a library that sources it first thing (the perf dry-run
# tests' tests/perf/dry_run_lib.sh); such a library is held to that here.
# shellcheck disable=SC2016  # the literal text of the source lines
direct='^source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"'
libs=(perf/dry_run_lib.sh)
for lib in "${libs[@]}"; do
  grep -q "$direct" "$lib" || { echo "FAIL: $lib does not source tests/support/time_limits.sh"; failures=$((failures + 1)); }
done
for f in "${scripts[@]}"; do
  [[ $f == ./support/time_limits.sh || $f == ./support/check_time_limits.sh ]] && continue
  grep -q 'time_scale' "$f" || continue
  sourced=0
  grep -q "$direct" "$f" && sourced=1
  for lib in "${libs[@]}"; do
    grep -q "^source \"\$MESHTRAIN_SOURCE_DIR/tests/$lib\"" "$f" && sourced=1
  done
  if ((!sourced)); then
    echo "FAIL: ${f#./} uses time_scale but does not source tests/support/time_limits.sh (or ${libs[*]})"
    failures=$((failures + 1))
  fi
done
((failures == 0)) || exit 1
echo "every time limit in ${#scripts[@]} test scripts is scaled by MESHTRAIN_TEST_TIMEOUT_SCALE"
