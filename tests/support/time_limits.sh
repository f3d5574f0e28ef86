# shellcheck shell=bash
# tests/support/time_limits.sh, sourced by every test script that sets a time limit of its
# own: `timeout` around a launch, a wait's deadline, the grace a process gets to end in.
#
# ctest scales each test's TIMEOUT by MESHTRAIN_TEST_TIMEOUT_SCALE (tests/CMakeLists.txt; the
# sanitizer presets set 2 or 4, their builds run several times slower) and passes the same
# factor to every test in its environment. A script multiplies its own limits by it,
# `timeout $((120 * time_scale)) ...`, so that under instrumentation a launch fails by
# hanging, not by the instrumentation's cost, and its limit stays as far inside the test's
# TIMEOUT as on a plain build. (A limit that is the thing tested, e.g.
# --parallel.collective_timeout, is not scaled; the grace allowed beyond it is.)
#
# Sets: time_scale (a whole number >= 1; 1 when run by hand outside ctest).
time_scale=${MESHTRAIN_TEST_TIMEOUT_SCALE:-1}
if [[ ! $time_scale =~ ^[1-9][0-9]*$ ]]; then
  echo "FAIL: MESHTRAIN_TEST_TIMEOUT_SCALE='$time_scale': give a whole number >= 1" >&2
  exit 1
fi
