#!/usr/bin/env bash
# perf/bench_ab.sh end to end on a tiny shape, this build's binary against itself (timings are
# not checked): every runs.csv row complete, the memory peaks included; the results table with
# both configurations and the final losses bitwise equal (one binary, deterministic runs). Then
# against an "older" baseline whose summary.json has no peak_by_category (binaries before
# issue 33): the comparison still runs and its in-use column says "-". And without BASELINE:
# exit 2 with a message. The results directory (perf/common.sh's staging): its hand-written
# NOTE.md survives a run, and a run that fails midway leaves the previous results as they
# were, its partial ones in OUT_DIR.partial.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
ab=$MESHTRAIN_SOURCE_DIR/perf/bench_ab.sh
# A shape that runs in about a second (ARGS follow the benchmark's own config).
source "$MESHTRAIN_SOURCE_DIR/tests/perf/tiny_shape.sh"
tiny="$tiny_model --train.micro_batch=2"
# bench_ab ARGS... (environment words): perf/bench_ab.sh into ./$name; status in $status.
# Each call is ~4 s of tiny launches; its limit is there for a hang, inside the test's TIMEOUT.
bench_ab() {
  local name=$1
  shift
  env PERF_MAX_LOAD=1000 MESHTRAIN="$MESHTRAIN_BIN" STEPS=3 WARMUP=1 ARGS="$tiny" "$@" \
    timeout $((40 * time_scale)) bash "$ab" "$PWD/$name" >"$name.log" 2>&1
  status=$?
}

echo "--- 1. the binary against itself, 2 reps, 1 rank no_shard and 2 ranks full_shard"
mkdir -p same && echo "hand-written commentary" >same/NOTE.md && echo "old" >same/results.md
bench_ab same BASELINE="$MESHTRAIN_BIN" REPS=2
[[ $status == 0 ]] || { cat same.log; fail "bench_ab.sh: exit status $status"; finish; }
[[ $(cat same/NOTE.md 2>/dev/null) == "hand-written commentary" ]] || fail "same: the run did not keep NOTE.md"
[[ ! -e same.partial ]] || fail "same: the staging directory same.partial is left after a run that finished"
"$py" - same/runs.csv same/results.md <<'PY' || fail "same: the tables are incomplete (above)"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
bad = [r for r in rows if any(v in (None, "") for v in r.values())]
assert len(rows) == 8 and not bad, f"{len(rows)} rows (want 8), incomplete: {bad}"
for r in rows:
    assert float(r["median_step_s"]) > 0 and float(r["peak_mem_bytes"]) > 0 and float(r["peak_in_use_bytes"]) > 0, r
table = [l for l in open(sys.argv[2]) if l.startswith("| 1 |") or l.startswith("| 2 |")]
assert len(table) == 2, table
for l in table:
    cells = [c.strip() for c in l.strip().strip("|").split("|")]
    assert cells[6] == "yes", f"final losses not equal: {l}"
    assert "-" not in cells[7].replace(" -> ", ""), f"a peak is missing: {l}"
print("runs.csv: 8 complete rows; results.md: 2 rows, losses equal, peaks present")
PY

echo "--- 2. against a baseline whose summary.json predates peak_by_category"
cat >old_meshtrain <<OLD
#!/usr/bin/env bash
# meshtrain, then (rank 0, once it has written it) its summary.json without peak_by_category.
"$MESHTRAIN_BIN" "\$@" || exit \$?
[[ \${OMPI_COMM_WORLD_RANK:-0} == 0 ]] || exit 0
for a in "\$@"; do [[ \$a == --output.dir=* ]] && out=\${a#--output.dir=}; done
"$py" -c 'import json, sys; s = json.load(open(sys.argv[1])); del s["peak_by_category"]; json.dump(s, open(sys.argv[1], "w"))' "\$out/summary.json"
OLD
chmod +x old_meshtrain
bench_ab old BASELINE="$PWD/old_meshtrain" REPS=1 CONFIGS=2:full_shard
[[ $status == 0 ]] || { cat old.log; fail "bench_ab.sh against the older baseline: exit status $status"; }
grep -q '^baseline,2,full_shard,1,.*,[0-9]\+,$' old/runs.csv ||
  { cat old/runs.csv; fail "old: the baseline's row should keep its reserved peak and leave the in-use column empty"; }
grep -q '^| 2 | full_shard |.*| yes | [0-9.]* -> [0-9.]*; - -> [0-9.]* |$' old/results.md ||
  { cat old/results.md; fail "old: the in-use peak the baseline lacks should read '-'"; }

echo "--- 3. a run that fails midway (the baseline's second run) into the directory of 1."
cp -r same same.before
cat >failing_meshtrain <<FAILING
#!/usr/bin/env bash
# meshtrain, until its second run: that one fails.
if [[ \${OMPI_COMM_WORLD_RANK:-0} == 0 ]] && [[ -e "$PWD/failing.ran" ]]; then echo "failing on purpose" >&2; exit 1; fi
touch "$PWD/failing.ran"
exec "$MESHTRAIN_BIN" "\$@"
FAILING
chmod +x failing_meshtrain
bench_ab same BASELINE="$PWD/failing_meshtrain" REPS=2 CONFIGS=1:no_shard
[[ $status == 1 ]] || { cat same.log; fail "failing: exit status $status, want 1"; }
diff -r same.before same >/dev/null || fail "failing: the previous results in same/ changed"
[[ -s same.partial/runs.csv ]] || fail "failing: no partial results in same.partial"

echo "--- 4. no BASELINE"
env -u BASELINE MESHTRAIN="$MESHTRAIN_BIN" timeout $((20 * time_scale)) bash "$ab" "$PWD/none" >none.log 2>&1
status=$?
if [[ $status != 2 ]] || ! grep -q "set BASELINE" none.log; then
  cat none.log
  fail "no BASELINE: exit status $status, want 2 and a message"
fi
finish "perf/bench_ab.sh: complete tables, equal losses, an older baseline's missing column as '-', results replaced only by a run that finished"
