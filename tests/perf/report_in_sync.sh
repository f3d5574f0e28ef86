#!/usr/bin/env bash
# perf/README.md is what perf/report.py writes from perf/results/ and perf/notes.md: a
# section added to the page by hand, or a results file changed without regenerating the
# page, makes them differ, and the next `perf/run-all.sh` would silently drop or change it.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
out=${TEST_TMP:-/tmp/perf_report_in_sync}/README.md
mkdir -p "$(dirname "$out")"
/usr/bin/python3 "$MESHTRAIN_SOURCE_DIR/perf/report.py" "$out" || { echo "FAIL: perf/report.py failed" >&2; exit 1; }
if ! diff -u "$MESHTRAIN_SOURCE_DIR/perf/README.md" "$out" >&2; then
  echo "FAIL: perf/README.md differs from what perf/report.py writes (above: - committed, + generated)." >&2
  echo "      Put hand-written sections in perf/results/<dir>/SECTION.md or perf/notes.md, then run" >&2
  echo "      /usr/bin/python3 perf/report.py" >&2
  exit 1
fi
echo "perf/README.md is what perf/report.py writes"
