#!/usr/bin/env bash
# perf/sweep.sh end to end on a tiny shape at 1 and 2 ranks (timings are not checked): the
# ceilings, `bench comm` (world and tp groups, every message checked), every (mode, ranks, tp,
# strategy) run with `meshtrain plan` before each mesh, the PyTorch peer, then perf/collect.py
# and perf/plot.py: summary.json with every run, its plan's prediction and memory, the peer's
# ratio where tp is 1, the scaling efficiency; comm.csv; the plots. Then perf/collect.py on a
# copy whose PyTorch peer trained another batch: it must refuse, by name, and write nothing.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
perf=$MESHTRAIN_SOURCE_DIR/perf
# The sweep gives the batch on both sides: MICRO sequences a rank, STRONG_GLOBAL.
source "$MESHTRAIN_SOURCE_DIR/tests/perf/tiny_shape.sh"

echo "--- 1. sweep.sh at 1 and 2 ranks"
# PERF_MAX_LOAD / PERF_IDLE_MAX: never wait for a quiet machine (the suite runs beside us).
# The limit is there for a hang, inside the test's TIMEOUT.
env PERF_MAX_LOAD=1000 PERF_IDLE_MAX=0 MESHTRAIN="$MESHTRAIN_BIN" STEPS=3 WARMUP=1 MICRO=2 STRONG_GLOBAL=4 \
  SWEEP_RANKS="1 2" CEILING_SHAPES=128 CEILING_SECONDS=0.1 COMM_MAX=64KiB COMM_TP_MAX=16KiB \
  MODEL_ARGS="$tiny_model" PEER_ARGS="$tiny_peer" \
  timeout $((200 * time_scale)) bash "$perf/sweep.sh" "$PWD/out" >sweep.log 2>&1
status=$?
if [[ $status != 0 ]]; then
  cat sweep.log
  fail "sweep.sh: exit status $status"
  finish
fi
"$py" - out <<'PY' || { cat sweep.log; fail "the sweep's tables are incomplete (above)"; }
import csv, json, math, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "summary.json")))
runs = {r["run"]: r for r in s["runs"]}
# strong and weak: 1 rank (no_shard), 2 ranks tp 1 (three strategies), 2 ranks tp 2 (no_shard).
want = {f"{m}-{n}" for m in ("strong", "weak") for n in
        ("1r-tp1-no_shard", "2r-tp1-full_shard", "2r-tp1-shard_grad_op", "2r-tp1-no_shard", "2r-tp2-no_shard")}
assert set(runs) == want, sorted(runs)
for name, r in runs.items():
    assert r["tokens_per_s"] > 0 and r["step_s"] > 0 and r["mfu"] > 0, (name, r)
    assert r["tokens_per_step"] == (4 * 32 if name.startswith("strong") else 2 * 32 * r["dp"]), (name, r["tokens_per_step"])
    assert r.get("predicted_step_s", 0) > 0 and r["plan_memory"].get("total", 0) > 0, (name, "no plan", r.get("predicted"))
    assert math.isfinite(r["efficiency"]), (name, r)
    if r["tp"] == 1:
        assert r["meshtrain_over_pytorch"] > 0, (name, r)
    else:
        assert "meshtrain_over_pytorch" not in r, name
assert sorted(s["peers"]) == ["strong-1r", "strong-2r", "weak-1r", "weak-2r"], sorted(s["peers"])
comm = list(csv.DictReader(open(os.path.join(out, "comm.csv"))))
assert {r["file"] for r in comm} == {"world-2.csv", "tp-2.csv"}, {r["file"] for r in comm}
for f in ("sweep.csv", "summary.csv", "summary.md") + tuple(
        f"plots/{p}.png" for p in ("throughput", "memory", "breakdown", "busbw", "predicted")):
    assert os.path.getsize(os.path.join(out, f)) > 0, f
print(f"summary.json: {len(runs)} runs with plans and peers; comm.csv: {len(comm)} rows; plots written")
PY
# Each of the two bench comm runs (world-2, tp-2) checked every message and found none wrong.
[[ $(cat out/comm/*.txt | grep -c "^# wrong results: 0 ") == 2 ]] ||
  fail "bench comm: want 'wrong results: 0' from both runs, got: $(grep -h 'wrong results' out/comm/*.txt)"

echo "--- 2. collect.py on a copy whose PyTorch peer trained another batch"
rm -rf other && cp -r out other && rm -f other/summary.json other/summary.md other/summary.csv
"$py" -c 'import json, sys; p = sys.argv[1]; r = json.load(open(p)); r["micro_batch"] *= 2; json.dump(r, open(p, "w"))' \
  other/peer/weak-2r.json
"$py" "$perf/collect.py" other >other.log 2>&1
status=$?
if [[ $status == 0 ]] || ! grep -q "peer/weak-2r.json vs runs/weak-2r-tp1-full_shard: PyTorch trained 256 tokens a step, meshtrain 128" other.log ||
  [[ -e other/summary.json ]]; then
  cat other.log
  fail "a peer of another batch: status $status, want a refusal naming it and no summary.json"
fi
finish "perf/sweep.sh: every run, plan, peer, comm row and plot on a tiny shape; a peer of another batch is refused"
