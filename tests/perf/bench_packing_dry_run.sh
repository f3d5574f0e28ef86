#!/usr/bin/env bash
# perf/bench_packing.sh on both of its data sets, 60 examples each, seq_len 256, 1 run of 6
# steps per layout (timings are not checked, only present and positive):
# 1. results.json and results.md: both cases, packed rows fuller than padded ones and holding
#    more than one example a row on the dates, each run's counted tokens/s, the step-1 losses.
# 2. REPORT_ONLY=1 reports the same runs again without preparing or training (the same
#    results.md, no log touched); with a STEPS the runs did not log it refuses.
# 3. STEPS=5 refused (the median is over steps 6..STEPS); a run that fails: exit 1 naming it.
# 4. another EXAMPLES prepares the data again (it was reused whatever the count before).
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
# bench NAME BIN [ENV...]: bench_packing.sh into ./bp; output in NAME.log, status in $status.
bench() {
  local name=$1 bin=$2
  shift 2
  env MESHTRAIN_BIN="$bin" DATASETS="dates longtail" SEQ_LENS=256 REPS=1 STEPS=6 EXAMPLES=60 "$@" \
    timeout $((90 * time_scale)) bash "$MESHTRAIN_SOURCE_DIR/perf/bench_packing.sh" "$PWD/bp" >"$name.log" 2>&1
  status=$?
}
# shellcheck disable=SC2016  # the wrapper expands its own arguments
failing_binary train_fails '$1 == train'

echo "--- 1. both data sets"
bench run "$MESHTRAIN_BIN"
[[ $status == 0 ]] || { cat run.log; fail "bench_packing.sh: exit status $status"; finish; }
"$py" - bp <<'PY' || fail "the results are incomplete or wrong (above)"
import json, math, sys
out = sys.argv[1]
r = json.load(open(f"{out}/results.json"))
pos = lambda x: isinstance(x, (int, float)) and math.isfinite(x) and x > 0
assert (r["reps"], r["steps"], r["loss_steps"]) == (1, 6, [1]), r
assert [(c["data"], c["seq_len"], c["examples"]) for c in r["cases"]] == [("dates", 256, 60), ("longtail", 256, 60)], r["cases"]
for c in r["cases"]:
    assert 0 < c["fill_padded"] < c["fill_packed"] <= 1, c
    assert c["examples_per_row"] > 1, c
    for m in ("padded", "packed"):
        assert len(c["counted_tokens_per_s"][m]) == 1 and pos(c["counted_tokens_per_s"][m][0]), c
        assert pos(c["median"][m]) and len(c["loss"][m]) == 1 and 9 < c["loss"][m][0] < 12, c
    assert pos(c["ratio"]) and c["ratio_spread"][0] <= c["ratio"] <= c["ratio_spread"][1], c
dates = r["cases"][0]
assert dates["examples_per_row"] >= 2, f"dates at 256 tokens: {dates['examples_per_row']} examples a packed row"
rows = [l for l in open(f"{out}/results.md") if l.startswith(("| dates | 256 |", "| longtail | 256 |"))]
assert len(rows) == 2, rows
print("bench_packing: 2 cases, packed fill", [round(c["fill_packed"], 3) for c in r["cases"]],
      "examples/row", [round(c["examples_per_row"], 2) for c in r["cases"]])
PY
grep -q "^| dates | 256 |" run.log || fail "the table was not printed"

echo "--- 2. REPORT_ONLY=1"
cp bp/results.md results.before
touch -d '2000-01-01' bp/runs/*.log bp/data/*.prepare.log
bench report "$MESHTRAIN_BIN" REPORT_ONLY=1
[[ $status == 0 ]] || { cat report.log; fail "REPORT_ONLY=1: exit status $status"; }
cmp -s results.before bp/results.md || fail "REPORT_ONLY=1: another results.md from the same runs"
[[ -z $(find bp/runs bp/data -name '*.log' -newer results.before) ]] || fail "REPORT_ONLY=1 prepared or trained again"
bench report_steps "$MESHTRAIN_BIN" REPORT_ONLY=1 STEPS=7
[[ $status != 0 ]] && grep -q "logged steps .* not 1..7" report_steps.log ||
  { cat report_steps.log; fail "REPORT_ONLY=1 with STEPS=7: exit status $status, want a refusal naming the steps"; }

echo "--- 3. refusals"
bench few_steps "$MESHTRAIN_BIN" STEPS=5
[[ $status == 2 ]] && grep -q "STEPS must be at least 6" few_steps.log ||
  { cat few_steps.log; fail "STEPS=5: exit status $status, want 2 with the reason"; }
bench fails "$PWD/train_fails"
[[ $status == 1 ]] && grep -q "bench_packing: run dates-256-packed-1 failed" fails.log ||
  { cat fails.log; fail "a failing run: exit status $status, want 1 naming the run"; }

echo "--- 4. another EXAMPLES"
bench fewer "$MESHTRAIN_BIN" EXAMPLES=40 DATASETS=dates
[[ $status == 0 ]] || { cat fewer.log; fail "EXAMPLES=40: exit status $status"; }
"$py" -c 'import json, sys; c = json.load(open("bp/results.json"))["cases"]; sys.exit(0 if [(x["data"], x["examples"]) for x in c] == [("dates", 40)] else 1)' ||
  fail "EXAMPLES=40: the data was not prepared again ($(cat bp/data/dates-256-packed.examples))"
[[ $(jq .train_examples bp/data/dates-256-packed/meta.json) -lt 40 ]] || fail "EXAMPLES=40: meta.json still counts $(jq .train_examples bp/data/dates-256-packed/meta.json) training examples"
finish "perf/bench_packing.sh: complete results, REPORT_ONLY, refusals, data prepared again for another EXAMPLES"
