#!/usr/bin/env bash
# Every perf script parses (bash -n; the Python ones compile), and perf/run-all.sh names only
# scripts that exist: the benchmarks without a dry run of their own (run-all.sh, the GPU's
# scripts' less-used branches) still fail here on a syntax error, before someone waits an
# hour for a study to start.
# Environment (set by meshtrain_add_script_test): MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
perf=$MESHTRAIN_SOURCE_DIR/perf
failures=0
n=0
for f in "$perf"/*.sh "$perf"/gpu/*.sh; do
  n=$((n + 1))
  bash -n "$f" || { echo "FAIL: $f does not parse (above)" >&2; failures=$((failures + 1)); }
done
mkdir -p "${TEST_TMP:-/tmp/perf_scripts_parse}"
for f in "$perf"/*.py "$perf"/gpu/*.py "$perf"/peer/*.py; do
  [[ -e $f ]] || continue
  n=$((n + 1))
  /usr/bin/python3 -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' "$f" ||
    { echo "FAIL: $f does not compile (above)" >&2; failures=$((failures + 1)); }
done
# run-all.sh's steps: `bash "$here/NAME"` and the report.
while read -r name; do
  [[ -f $perf/$name ]] || { echo "FAIL: perf/run-all.sh runs $name, which does not exist" >&2; failures=$((failures + 1)); }
done < <(grep -oE '"\$here/[A-Za-z0-9_./-]+"' "$perf/run-all.sh" | sed 's/^"\$here\///; s/"$//')
[[ $(grep -cE '"\$here/' "$perf/run-all.sh") -ge 6 ]] || { echo "FAIL: perf/run-all.sh's steps were not found" >&2; failures=$((failures + 1)); }
((failures == 0)) || { echo "$failures check(s) failed" >&2; exit 1; }
echo "$n perf scripts parse; perf/run-all.sh names only existing scripts"
