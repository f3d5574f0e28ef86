#!/usr/bin/env bash
# perf/profile.sh on the tiny shape (tests/perf/tiny_shape.sh), 2 steps, into a relative
# OUT_DIR: both profiles grouped (meshtrain.json, pytorch.json: positive CPU seconds a step,
# categories whose shares add up to 1), meta.json, breakdown.txt with both sections, the run's
# config.ini naming the published directory. Then a meshtrain that fails: exit non-zero, the
# previous results kept. Skipped (77) where `perf record` cannot run.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
source "$MESHTRAIN_SOURCE_DIR/tests/perf/tiny_shape.sh"
if ! perf record -q -o probe.data -- true >probe.log 2>&1; then
  echo "SKIP: perf record cannot run here: $(head -c 300 probe.log)"
  exit 77
fi
# profile NAME BIN: profile.sh into ./prof (relative); output in NAME.log, status in $status.
profile() {
  env PERF_MAX_LOAD=1000 MESHTRAIN="$2" STEPS=2 MODEL_ARGS="$tiny_model --train.micro_batch=2" \
    PEER_ARGS="$tiny_peer --micro_batch 2" timeout $((90 * time_scale)) bash "$MESHTRAIN_SOURCE_DIR/perf/profile.sh" prof \
    >"$1.log" 2>&1
  status=$?
}
failing_binary failing

echo "--- 1. profile.sh, relative OUT_DIR"
profile ok "$MESHTRAIN_BIN"
if [[ $status != 0 ]]; then cat ok.log; fail "profile.sh: exit status $status"; finish; fi
"$py" - prof <<'PY' || fail "the results are incomplete or wrong (above)"
import json, math, os, sys
out = sys.argv[1]
for name in ("meshtrain", "pytorch"):
    r = json.load(open(f"{out}/{name}.json"))
    assert r["name"] == name and r["steps"] == 2, r
    assert math.isfinite(r["cpu_s_per_step"]) and r["cpu_s_per_step"] > 0, r
    cats = r["categories"]
    assert cats and all(c["s_per_step"] >= 0 and c["category"] for c in cats), cats
    assert abs(sum(c["share"] for c in cats) - 1) < 0.01, [c["share"] for c in cats]
assert json.load(open(f"{out}/meta.json"))["steps"] == 2
text = open(f"{out}/breakdown.txt").read()
assert text.startswith("meshtrain: ") and "\npytorch: " in text, text
ini = open(f"{out}/mt-run/config.ini").read()
assert f"dir = {os.path.abspath(out)}/mt-run\n" in ini, [l for l in ini.splitlines() if l.startswith("dir = ")]
print("profile: both breakdowns complete")
PY
[[ ! -e prof.partial && ! -e $MESHTRAIN_SOURCE_DIR/prof ]] || fail "profile.sh left prof.partial, or wrote into the source tree"

echo "--- 2. a meshtrain that fails"
cp -r prof prof.before
profile failing "$PWD/failing"
[[ $status != 0 ]] || fail "a failing meshtrain: exit status 0"
diff -r prof.before prof >/dev/null || fail "a failing meshtrain: the previous results changed"
finish "perf/profile.sh: both breakdowns complete, a failing run keeps the previous results"
