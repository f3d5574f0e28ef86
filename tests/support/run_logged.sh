# shellcheck shell=bash
# Sourced by script tests that have a `fail` function:
#   run NAME CMD...  runs CMD under a limit of ${run_limit:-120} x time_scale seconds with its
#                    output in NAME.log; a failure prints the log, calls fail and returns 1.
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
run() {
  local name=$1
  shift
  timeout $((${run_limit:-120} * time_scale)) "$@" >"$name.log" 2>&1 ||
    { local rc=$?; cat "$name.log"; fail "$name: exit status $rc"; return 1; }
}
