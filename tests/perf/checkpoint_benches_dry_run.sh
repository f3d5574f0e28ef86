#!/usr/bin/env bash
# The checkpoint benchmarks on a tiny model (timings are not checked, only present and positive):
# 1. perf/bench_async_checkpoint.sh, 1 repetition of 5 steps with a save every 2: results.json
#    with the three variants' tokens/s and ratios, 2 saves in the sync run, at least one
#    reported by the async run (the last may complete after the loop), both async
#    checkpoints bitwise equal to the sync ones; results.md's three rows; SECTION.md kept.
# 2. the same with an async run that trains from another seed: its checkpoints differ, the
#    script says so and exits 1, the previous results stay as they were.
# 3. perf/bench_save.sh, 1 iteration, on one host (shared memory) and, where namespace hosts
#    can be made (root), across 2 hosts: both strategies of each case in results.json and
#    results.md, the network ceiling across hosts; NOTE.md kept.
# 4. the same with a binary whose hybrid_shard saves fail: exit 1 naming the case, the
#    previous results kept (the failed case was dropped from the table before, exit 0).
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
source "$MESHTRAIN_SOURCE_DIR/tests/multihost/cluster.sh"
perf=$MESHTRAIN_SOURCE_DIR/perf
# async BIN NAME: bench_async_checkpoint.sh into ./async; output in NAME.log, status in $status.
async() {
  env PERF_MAX_LOAD=1000 PERF_IDLE_MAX=0 MESHTRAIN="$1" CONFIG="$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini" \
    REPS=1 STEPS=5 EVERY=2 timeout $((60 * time_scale)) bash "$perf/bench_async_checkpoint.sh" "$PWD/async" >"$2.log" 2>&1
  status=$?
}
# save BIN NAME: bench_save.sh into ./save; output in NAME.log, status in $status.
cases="1host-shm"
cluster_check >/dev/null && cases="1host-shm 2hosts"
save() {
  env PERF_MAX_LOAD=1000 MESHTRAIN="$1" CASES="$cases" ITERS=1 MODEL_ARGS="--model.n_layers=1" \
    timeout $((90 * time_scale)) bash "$perf/bench_save.sh" "$PWD/save" >"$2.log" 2>&1
  status=$?
}
# shellcheck disable=SC2016  # the wrappers expand their own arguments
{
  printf '#!/usr/bin/env bash\n[[ " $* " == *" --checkpoint.async=true "* ]] && set -- "$@" --train.seed=7\n'
  printf 'exec "%s" "$@"\n' "$MESHTRAIN_BIN"
} >async_other_seed && chmod +x async_other_seed
# shellcheck disable=SC2016
failing_binary hybrid_fails '" $* " == *" --parallel.strategy=hybrid_shard "*'

echo "--- 1. bench_async_checkpoint.sh"
mkdir -p async && echo "hand-written section" >async/SECTION.md
async "$MESHTRAIN_BIN" async
if [[ $status != 0 ]]; then cat async.log; fail "bench_async_checkpoint.sh: exit status $status"; fi
"$py" - async <<'PY' || fail "bench_async_checkpoint: the results are incomplete or wrong (above)"
import json, math, sys
out = sys.argv[1]
r = json.load(open(f"{out}/results.json"))
pos = lambda x: isinstance(x, (int, float)) and math.isfinite(x) and x > 0
for v in ("none", "sync", "async"):
    assert pos(r["tokens_per_s"][v]["median"]), (v, r["tokens_per_s"])
    assert set(r["runs"][f"{v}-1"]) >= {"variant", "rep", "loop_tokens_per_s", "saves", "save_s", "held_s"}, r["runs"][f"{v}-1"]
for v in ("sync", "async"):
    assert pos(r["ratio_to_none"][v]["median"]) and pos(r["save_held_s"][v]["median"]), (v, r)
assert r["runs"]["none-1"]["saves"] == 0 and r["runs"]["sync-1"]["saves"] == 2, r["runs"]
assert 1 <= r["runs"]["async-1"]["saves"] <= 2, r["runs"]["async-1"]
assert all(pos(x) for x in r["runs"]["sync-1"]["save_s"] + r["runs"]["async-1"]["held_s"]), r["runs"]
assert (r["reps"], r["steps"], r["every"]) == (1, 5, 2), r
same = [l for l in open(f"{out}/runs/same-1.txt") if " == " in l]
assert len(same) == 2, f"same-1.txt: {len(same)} equal checkpoints, want 2"
rows = [l for l in open(f"{out}/results.md") if l.startswith(("| none", "| sync", "| async"))]
assert len(rows) == 3, rows
print("bench_async_checkpoint: 3 variants, 2 checkpoints bitwise equal")
PY
[[ $(cat async/SECTION.md 2>/dev/null) == "hand-written section" ]] || fail "bench_async_checkpoint: SECTION.md was not kept"
[[ ! -e async.partial ]] || fail "bench_async_checkpoint: async.partial left after a run that finished"

echo "--- 2. bench_async_checkpoint.sh with async checkpoints that differ"
cp -r async async.before
async "$PWD/async_other_seed" async_differs
[[ $status == 1 ]] || fail "differing checkpoints: exit status $status, want 1"
grep -q "async-1's step_00000002.h5 differs from sync-1's" async_differs.log ||
  { cat async_differs.log; fail "differing checkpoints: not named"; }
diff -r async.before async >/dev/null || fail "differing checkpoints: the previous results changed"

echo "--- 3. bench_save.sh: $cases"
mkdir -p save && echo "hand-written note" >save/NOTE.md
save "$MESHTRAIN_BIN" save
if [[ $status != 0 ]]; then cat save.log; fail "bench_save.sh: exit status $status"; fi
"$py" - save $cases <<'PY' || fail "bench_save: the results are incomplete or wrong (above)"
import json, math, sys
out, cases = sys.argv[1], sys.argv[2:]
r = json.load(open(f"{out}/results.json"))
pos = lambda x: isinstance(x, (int, float)) and math.isfinite(x) and x > 0
got = sorted((x["case"], x["strategy"]) for x in r["runs"])
want = sorted((c, s) for c in cases for s in ("full_shard", "hybrid_shard"))
assert got == want, (got, want)
for x in r["runs"]:
    for k in ("save_seconds", "save_gbps", "file_system_gbps", "save_bytes"):
        assert pos(x[k]), (x["case"], x["strategy"], k, x.get(k))
    assert pos(x["network_gbps"]) if x["case"] != "1host-shm" else "network_gbps" not in x, x
    assert x["bound"], x
rows = [l for l in open(f"{out}/results.md") if l.startswith("| ") and "_shard |" in l]
assert len(rows) == len(want), rows
print(f"bench_save: {len(want)} rows")
PY
[[ $(cat save/NOTE.md 2>/dev/null) == "hand-written note" ]] || fail "bench_save: NOTE.md was not kept"

echo "--- 4. bench_save.sh with a failing case"
cp -r save save.before
save "$PWD/hybrid_fails" save_fails
[[ $status == 1 ]] || fail "a failing case: exit status $status, want 1"
grep -q "perf: 1host-shm-hybrid_shard failed" save_fails.log || { cat save_fails.log; fail "a failing case: not named"; }
diff -r save.before save >/dev/null || fail "a failing case: the previous results changed"
finish "perf/bench_async_checkpoint.sh and perf/bench_save.sh: complete results, a differing checkpoint and a failed case refused"
