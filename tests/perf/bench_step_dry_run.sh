#!/usr/bin/env bash
# perf/bench_step.sh end to end on a tiny shape (timings are not checked): the ceilings, the
# meshtrain runs (1 rank no_shard, 2 ranks full_shard and no_shard) and the PyTorch peer
# (perf/peer/torch_gpt.py, 1 rank and DDP on 2) on the same model, then perf/summarize_step.py:
# results.json with all five configurations and finite ratios, results.md with their rows. Then
# summarize_step.py on copies of that run whose PyTorch side trained another model or another
# batch (what MODEL_ARGS without the matching PEER_ARGS gives): it must refuse, by name, and
# write no results, instead of printing a ratio of two different trainings; the same for a run
# whose metrics cannot be read (its configuration would be missing, its ratio nan).
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
perf=$MESHTRAIN_SOURCE_DIR/perf
source "$MESHTRAIN_SOURCE_DIR/tests/perf/tiny_shape.sh"
# 2 sequences a rank on both sides.
model="$tiny_model --train.micro_batch=2"
peer="$tiny_peer --micro_batch 2"

echo "--- 1. bench_step.sh, 1 rep of each configuration"
# PERF_MAX_LOAD / PERF_IDLE_MAX: never wait for a quiet machine (the suite runs beside us).
# Its limit is there for a hang, inside the test's TIMEOUT.
env PERF_MAX_LOAD=1000 PERF_IDLE_MAX=0 MESHTRAIN="$MESHTRAIN_BIN" STEPS=3 WARMUP=1 REPS=1 \
  MODEL_ARGS="$model" PEER_ARGS="$peer" CEILING_SHAPES=128,64x96x32 CEILING_SECONDS=0.1 \
  timeout $((100 * time_scale)) bash "$perf/bench_step.sh" "$PWD/out" >bench.log 2>&1
status=$?
if [[ $status != 0 ]]; then
  cat bench.log
  fail "bench_step.sh: exit status $status"
  finish
fi
"$py" - out <<'PY' || fail "the results are incomplete (above)"
import json, math, os, sys
out = sys.argv[1]
for f in ("machine.json", "ceilings/gemm-1.json", "ceilings/gemm-2.json", "ceilings/memory-1.json", "ceilings/memory-2.json"):
    assert os.path.getsize(os.path.join(out, f)) > 0, f
r = json.load(open(os.path.join(out, "results.json")))
names = {"mt-1r-no_shard", "pt-1r", "mt-2r-full_shard", "mt-2r-no_shard", "pt-2r-ddp"}
assert set(r["configs"]) == names, sorted(r["configs"])
for name, c in r["configs"].items():
    assert c["runs"] == 1 and c["step_s"] > 0 and c["tokens_per_s"] > 0 and 0 < c["mfu"], (name, c)
    assert c["ranks"] == (1 if "-1r" in name else 2), (name, c)
# The same model and batch on both sides: 2 sequences of 32 tokens a rank.
for name in names:
    per_step = r["configs"][name]["tokens_per_s"] * r["configs"][name]["step_s"]
    assert abs(per_step - 64 * r["configs"][name]["ranks"]) < 1e-6, (name, per_step)
assert all(math.isfinite(v) and v > 0 for v in r["ratios"].values()), r["ratios"]
md = open(os.path.join(out, "results.md")).read()
for label in ("meshtrain (1 rank)", "PyTorch (1 rank)", "meshtrain full_shard", "meshtrain no_shard", "PyTorch DDP (gloo)"):
    assert f"| {label} |" in md, label
assert "nan" not in md, md
print("results.json: 5 configurations, tokens a step equal, ratios finite; results.md: 5 rows")
PY

# summarize ARGS...: summarize_step.py on the copy ./$1 after the edit ($2: Python on the
# PyTorch result dict r); its status in $status, its output in $1.log.
summarize() {
  local copy=$1 edit=$2
  rm -rf "$copy" && cp -r out "$copy" && rm -f "$copy/results.json" "$copy/results.md"
  "$py" - "$copy/runs/pt-2r-ddp-1/result.json" "$edit" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(r, open(sys.argv[1], "w"))
PY
  "$py" "$perf/summarize_step.py" "$copy" --warmup 1 >"$copy.log" 2>&1
  status=$?
}
echo "--- 2. the PyTorch side trained another model"
summarize other_model 'r["flops_per_token"] *= 1.25'
if [[ $status == 0 ]] || ! grep -q "pt-2r-ddp vs mt-2r-full_shard: PyTorch trained .* FLOP per token" other_model.log || [[ -e other_model/results.json ]]; then
  cat other_model.log
  fail "another model on the PyTorch side: status $status, want a refusal naming pt-2r-ddp and no results.json"
fi
echo "--- 3. the PyTorch side trained another batch"
summarize other_batch 'r["micro_batch"] *= 2'
if [[ $status == 0 ]] || ! grep -q "pt-2r-ddp vs mt-2r-no_shard: PyTorch trained 256 tokens a step, meshtrain 128" other_batch.log || [[ -e other_batch/results.json ]]; then
  cat other_batch.log
  fail "another batch on the PyTorch side: status $status, want a refusal naming pt-2r-ddp and no results.json"
fi
echo "--- 4. a run whose metrics cannot be read"
summarize unreadable 'pass'
rm -f unreadable/results.json && rm unreadable/runs/mt-2r-no_shard-1/metrics.jsonl
"$py" "$perf/summarize_step.py" unreadable --warmup 1 >unreadable.log 2>&1
status=$?
if [[ $status == 0 ]] || ! grep -q "runs/mt-2r-no_shard-1: FileNotFoundError" unreadable.log || [[ -e unreadable/results.json ]]; then
  cat unreadable.log
  fail "an unreadable run: status $status, want a refusal naming it and no results.json"
fi
echo "--- 5. the unchanged copy summarizes"
summarize same 'pass'
[[ $status == 0 && -s same/results.json ]] || { cat same.log; fail "the unchanged run: status $status"; }
finish "perf/bench_step.sh: complete results on a tiny shape; a PyTorch side of another model or batch is refused"
