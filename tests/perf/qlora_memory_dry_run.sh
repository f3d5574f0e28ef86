#!/usr/bin/env bash
# perf/bench_qlora_memory.sh with MODEL=tiny (inputs/tiny-llama.ini at d_model 128, 1 step,
# bases none, nf4 and int8; timings are not checked): results.json with every base's measured
# and planned peak and frozen all-gather bytes (positive), the nf4 and int8 bases gathering
# fewer bytes than bf16's (as the plan says), results.md's rows and verdicts; then REUSE=1
# keeping the runs; then a training that fails: exit 1 naming the base.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
# qlora NAME BIN [ENV...]: bench_qlora_memory.sh MODEL=tiny into ./out; output in NAME.log, status in $status.
qlora() {
  local name=$1 bin=$2
  shift 2
  env PERF_MAX_LOAD=1000 PERF_IDLE_MAX=0 MESHTRAIN="$bin" MODEL=tiny "$@" \
    timeout $((60 * time_scale)) bash "$MESHTRAIN_SOURCE_DIR/perf/bench_qlora_memory.sh" "$PWD/out" >"$name.log" 2>&1
  status=$?
}
# shellcheck disable=SC2016  # the wrapper expands its own arguments
failing_binary int8_fails '$1 == train && " $* " == *" --model.base_quant=int8 "*'

echo "--- 1. MODEL=tiny"
qlora tiny "$MESHTRAIN_BIN"
if [[ $status != 0 ]]; then cat tiny.log; fail "bench_qlora_memory.sh: exit status $status"; finish; fi
"$py" - out <<'PY' || fail "the results are incomplete or wrong (above)"
import json, math, sys
out = sys.argv[1]
r = json.load(open(f"{out}/results.json"))
pos = lambda x: isinstance(x, (int, float)) and math.isfinite(x) and x > 0
assert list(r["runs"]) == ["none", "nf4", "int8"], list(r["runs"])
for q, x in r["runs"].items():
    for k in ("peak_bytes", "frozen_gather_bytes", "plan_frozen_bytes", "plan_frozen_gather_bytes", "plan_peak_bytes"):
        assert pos(x[k]), (q, k, x.get(k))
    assert x["peak_by_category"]["total_in_use"] == x["peak_bytes"] and len(x["step_time_s"]) == 1, (q, x)
g = {q: x["frozen_gather_bytes"] for q, x in r["runs"].items()}
assert g["nf4"] < g["int8"] < g["none"], g
md = open(f"{out}/results.md").read()
for row in ("| bf16 |", "| nf4 |", "| int8 |"):
    assert md.count(row) == 2, (row, md)
assert sum(l.startswith("- ") and "plan" in l for l in md.splitlines()) == 3, md
print(f"bench_qlora_memory: 3 bases, frozen all-gather bytes {g}")
PY

echo "--- 2. REUSE=1 keeps the runs"
touch out/runs/nf4/kept
qlora reuse "$MESHTRAIN_BIN" REUSE=1
[[ $status == 0 ]] || { cat reuse.log; fail "REUSE=1: exit status $status"; }
[[ $(grep -c "kept the run in" reuse.log) == 3 && -e out/runs/nf4/kept ]] || fail "REUSE=1: the runs were not kept"

echo "--- 3. a training that fails"
qlora failing "$PWD/int8_fails"
[[ $status == 1 ]] || fail "a failing training: exit status $status, want 1"
grep -q "training failed (int8)" failing.log || { cat failing.log; fail "a failing training: not named"; }
finish "perf/bench_qlora_memory.sh MODEL=tiny: complete results for three bases, REUSE, a failed training named"
