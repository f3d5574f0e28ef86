#!/usr/bin/env bash
# perf/bench_eval.sh (1 rep, ~2 s a run; timings are not checked): this build's binary against
# itself as BASELINE, both given by relative paths with a relative OUT_DIR (the runs happen in
# a scratch directory): results.json with both binaries, one loss each, equal, within 1e-4 of
# the float64 reference; results.md with both rows. Then against a BASELINE whose eval reads
# windows of 64 instead of 128 (another loss): the script must stop naming that run and the
# reference, and leave the previous results as they were.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
bench=$MESHTRAIN_SOURCE_DIR/perf/bench_eval.sh
# run NAME BASELINE: bench_eval.sh into ./out (relative), its output in NAME.log, status in $status.
run() {
  env PERF_MAX_LOAD=1000 PERF_IDLE_MAX=0 MESHTRAIN="$MESHTRAIN_BIN" BASELINE="$2" REPS=1 \
    timeout $((60 * time_scale)) bash "$bench" out >"$1.log" 2>&1
  status=$?
}
printf '#!/usr/bin/env bash\nexec "%s" "$@"\n' "$MESHTRAIN_BIN" >same && chmod +x same
# The same binary reading windows of 64 tokens: 4 windows, another loss.
# shellcheck disable=SC2016  # the wrapper expands its own arguments
printf '#!/usr/bin/env bash\nexec "%s" "${@/--train.seq_len=128/--train.seq_len=64}"\n' "$MESHTRAIN_BIN" >shorter &&
  chmod +x shorter

echo "--- 1. the binary against itself (relative BASELINE and OUT_DIR)"
run same ./same
if [[ $status != 0 ]]; then
  cat same.log
  fail "bench_eval.sh: exit status $status"
  finish
fi
"$py" - out <<'PY' || fail "the results are incomplete or wrong (above)"
import json, os, sys
out = sys.argv[1]
r = json.load(open(os.path.join(out, "results.json")))
ref = json.load(open(os.path.join(out, "reference.json")))["loss"]
assert r["reference_loss"] == ref, (r["reference_loss"], ref)
assert set(r["runs"]) == {"meshtrain", "baseline"}, r["runs"].keys()
losses = {b: x["loss"] for b, x in r["runs"].items()}
assert losses["meshtrain"] == losses["baseline"] and abs(losses["meshtrain"] - ref) <= 1e-4, (losses, ref)
for b, x in r["runs"].items():
    assert len(x["wall_s"]) == 1 and x["median_wall_s"] > 0 and x["median_eval_s"] > 0, (b, x)
md = open(os.path.join(out, "results.md")).read()
rows = [l for l in md.splitlines() if l.startswith("| meshtrain |") or l.startswith("| baseline |")]
assert len(rows) == 2 and "float64 reference" in md, md
print(f"loss {losses['meshtrain']!r}, reference {ref!r}")
PY
before=$(cat out/results.json)

echo "--- 2. against a baseline that evaluates other windows"
run shorter ./shorter
if [[ $status == 0 ]] || ! grep -q "bench_eval: baseline run 1: loss .* over 4 windows, the float64 reference" shorter.log; then
  cat shorter.log
  fail "a baseline with another loss: status $status, want a failure naming the run, its 4 windows and the reference"
fi
[[ $(cat out/results.json 2>/dev/null) == "$before" ]] || fail "the failed run changed the previous results in out/"
finish "perf/bench_eval.sh: both binaries at the float64 reference with relative paths; another loss refused, results kept"
