#!/usr/bin/env bash
# doc/configuration.md lists every configuration key with its default, as
# `meshtrain train --help` prints them. A new key without documentation fails here;
# `bash scripts/gen-config-doc.sh BUILD_DIR` regenerates the list.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
doc="$MESHTRAIN_SOURCE_DIR/doc/configuration.md"
help=$(timeout $((60 * time_scale)) "$MESHTRAIN_BIN" train --help) || { echo "FAIL: meshtrain train --help exited non-zero" >&2; exit 1; }
missing=0
while read -r entry; do
  grep -qF -- "$entry" "$doc" || { echo "FAIL: doc/configuration.md lacks '$entry'" >&2; missing=$((missing + 1)); }
done < <(grep -oE -- '--[a-z_]+\.[a-z_0-9]+ arg \(=[^)]*\)' <<<"$help")
count=$(grep -cE -- '--[a-z_]+\.[a-z_0-9]+ arg' <<<"$help")
(( count > 60 )) || { echo "FAIL: only $count keys in --help" >&2; exit 1; }
if (( missing )); then
  echo "$missing key(s) undocumented: run  bash scripts/gen-config-doc.sh $MESHTRAIN_BUILD_DIR" >&2
  exit 1
fi
echo "all $count keys are documented"
