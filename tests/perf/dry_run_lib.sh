# shellcheck shell=bash
# tests/perf/dry_run_lib.sh: the start of a perf script's dry-run test, sourced first (after
# `set -uo pipefail`): the time limits, an empty $TEST_TMP as the working directory, and
# batch_lib.sh (fail, finish, $py). Then failing_binary, the meshtrain that fails on purpose,
# which the tests hand to a script to see it name the failure and keep its previous results.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
# shellcheck source=tests/support/time_limits.sh
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
# shellcheck source=tests/batch/batch_lib.sh
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

# failing_binary FILE [CONDITION]: writes FILE, a meshtrain that prints "failing on purpose"
# and exits 1 when the bash test CONDITION holds for its arguments ('$1 == train',
# '" $* " == *" --model.base_quant=int8 "*'; default: always) and runs $MESHTRAIN_BIN otherwise.
failing_binary() {
  # shellcheck disable=SC2016  # the wrapper expands its own arguments
  printf '#!/usr/bin/env bash\n[[ %s ]] && { echo "failing on purpose" >&2; exit 1; }\nexec "%s" "$@"\n' \
    "${2:-1 == 1}" "$MESHTRAIN_BIN" >"$1"
  chmod +x "$1"
}
