#!/usr/bin/env bash
# The namespace-cluster benchmarks on a tiny model, 2 hosts x 2 ranks, 1 repeat of 3 steps, a
# 10 Gbit/s shaped link (timings are not checked, only present and positive). Needs root
# (tests/multihost/cluster.sh); elsewhere "SKIP: <reason>" and exit 77.
# 1. perf/multihost_sweep.sh, two meshes, `bench comm` up to 1 MiB: both groups' bandwidths
#    measured and given to the plans, every mesh with its run, plan and summary row, the run
#    directories' config.ini naming the published directory, NOTE.md kept.
# 2. the same with a mesh that cannot run on 4 ranks: exit 1 naming it, previous results kept
#    (a failed run was only printed, and the results replaced, before); PER_HOST=1 refused.
# 3. perf/allreduce_ab.sh, one mesh, algorithms 0 and 3: runs.csv's two rows, results.md's row
#    with equal final losses (a sum of two is exact in any order), NOTE.md kept.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
source "$MESHTRAIN_SOURCE_DIR/tests/multihost/cluster.sh"
if ! reason=$(cluster_check); then
  # As root after install-deps.sh (run-tests.sh sets MESHTRAIN_REQUIRE_MULTIHOST=1) it must
  # run: a skip there would hide a test that did not run (tests/multihost/mh_lib.sh).
  if [[ ${MESHTRAIN_REQUIRE_MULTIHOST:-0} == 1 ]]; then echo "FAIL: MESHTRAIN_REQUIRE_MULTIHOST=1, but ${reason#SKIP: }"; exit 1; fi
  echo "$reason"
  exit 77
fi
perf=$MESHTRAIN_SOURCE_DIR/perf
tiny=(PERF_MAX_LOAD=1000 MESHTRAIN="$MESHTRAIN_BIN" HOSTS=2 PER_HOST=2 STEPS=3 WARMUP=1 RATE=10gbit
      MODEL_ARGS="--model.n_layers=1")
# sweep NAME MESHES [ENV...]: multihost_sweep.sh into ./sweep; output in NAME.log, status in $status.
sweep() {
  local name=$1 meshes=$2
  shift 2
  env "${tiny[@]}" REPEATS=1 COMM_MAX_BYTES=1MiB MESHES="$meshes" "$@" \
    timeout $((120 * time_scale)) bash "$perf/multihost_sweep.sh" "$PWD/sweep" >"$name.log" 2>&1
  status=$?
}

echo "--- 1. multihost_sweep.sh"
mkdir -p sweep && echo "hand-written note" >sweep/NOTE.md
meshes="full_shard:1:4:1 hybrid_shard:2:2:1"
sweep sweep "$meshes"
if [[ $status != 0 ]]; then cat sweep.log; fail "multihost_sweep.sh: exit status $status"; fi
"$py" - sweep "$meshes" <<'PY' || fail "multihost_sweep: the results are incomplete or wrong (above)"
import csv, json, math, os, re, sys
out, meshes = sys.argv[1], sys.argv[2].split()
pos = lambda x: isinstance(x, (int, float)) and math.isfinite(x) and x > 0
setup = open(f"{out}/setup.txt").read()
m = re.search(r"intra,inter \(GB/s, median over 1-16 MiB\): ([0-9.e+-]+),([0-9.e+-]+)", setup)
assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, f"setup.txt: no bandwidths:\n{setup}"
for g in ("dp_shard", "dp_replicate"):
    rows = [r for r in csv.DictReader(open(f"{out}/comm/{g}.csv")) if r["op"] == "all_reduce"]
    assert rows and max(int(r["bytes"]) for r in rows) == 1 << 20, (g, rows)
assert open(f"{out}/meshes.txt").read().split() == meshes
s = json.load(open(f"{out}/summary.json"))
got = sorted(f"{c['strategy']}:{c['dp_replicate']}:{c['dp_shard']}:{c['tp']}" for c in s["configurations"])
assert got == sorted(meshes), got
for c in s["configurations"]:
    assert c["repeats"] == 1 and pos(c["measured_step_s"]) and pos(c["predicted_step_s"]) and pos(c["ratio"]), c
for mesh in meshes:
    st, r, d, t = mesh.split(":")
    name = f"{st}-{r}x{d}x{t}-r1"
    plan = json.load(open(f"{out}/plans/{name}.json"))
    assert plan, name
    ini = open(f"{out}/runs/{name}/config.ini").read()
    want = f"dir = {os.path.abspath(out)}/runs/{name}\n"
    assert want in ini, f"{name}/config.ini does not name the published directory: {[l for l in ini.splitlines() if l.startswith('dir = /')]}"
assert os.path.exists(f"{out}/summary.md") and os.path.exists(f"{out}/predicted.png")
print(f"multihost_sweep: {len(meshes)} configurations, bandwidths {m.group(1)},{m.group(2)} GB/s")
PY
[[ $(cat sweep/NOTE.md 2>/dev/null) == "hand-written note" ]] || fail "multihost_sweep: NOTE.md was not kept"
[[ ! -e sweep.partial ]] || fail "multihost_sweep: sweep.partial left after a run that finished"

echo "--- 2. multihost_sweep.sh with a mesh of 3 ranks on 4, and PER_HOST=1"
cp -r sweep sweep.before
sweep bad_mesh "hybrid_shard:2:2:1 full_shard:1:3:1"
[[ $status == 1 ]] || fail "a mesh that cannot run: exit status $status, want 1"
grep -q "perf: run full_shard-1x3x1 failed" bad_mesh.log || { cat bad_mesh.log; fail "a mesh that cannot run: not named"; }
diff -r sweep.before sweep >/dev/null || fail "a mesh that cannot run: the previous results changed"
sweep one_per_host "$meshes" PER_HOST=1
[[ $status == 2 ]] && grep -q "PER_HOST must be at least 2" one_per_host.log ||
  { cat one_per_host.log; fail "PER_HOST=1: exit status $status, want 2 and a message"; }

echo "--- 3. allreduce_ab.sh"
mkdir -p ab && echo "hand-written note" >ab/NOTE.md
env "${tiny[@]}" REPS=1 ALGS="0 3" MESHES="hybrid_shard:2:2:1" \
  timeout $((60 * time_scale)) bash "$perf/allreduce_ab.sh" "$PWD/ab" >ab.log 2>&1
status=$?
if [[ $status != 0 ]]; then cat ab.log; fail "allreduce_ab.sh: exit status $status"; fi
"$py" - ab <<'PY' || fail "allreduce_ab: the results are incomplete or wrong (above)"
import csv, math, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/runs.csv")))
assert sorted((r["strategy"], r["mesh"], r["algorithm"], r["rep"]) for r in rows) == \
    [("hybrid_shard", "2x2x1", "0", "1"), ("hybrid_shard", "2x2x1", "3", "1")], rows
for r in rows:
    assert float(r["median_step_s"]) > 0 and math.isfinite(float(r["final_loss"])), r
table = [l for l in open(f"{out}/results.md") if l.startswith("| hybrid_shard |")]
assert len(table) == 1 and table[0].rstrip().endswith("| equal |"), table
print("allreduce_ab: 2 runs, final losses equal")
PY
[[ $(cat ab/NOTE.md 2>/dev/null) == "hand-written note" ]] || fail "allreduce_ab: NOTE.md was not kept"
finish "perf/multihost_sweep.sh and perf/allreduce_ab.sh: complete results; a failed run and PER_HOST=1 refused"
