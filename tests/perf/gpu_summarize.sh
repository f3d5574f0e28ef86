#!/usr/bin/env bash
# perf/gpu/summarize.py on a fixture work folder, as perf/gpu/validate.sh leaves it: every
# number in results.json checked against what the fixture implies, and the verdict.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
S=$MESHTRAIN_SOURCE_DIR/perf/gpu/summarize.py
w=${TEST_TMP:-/tmp/gpu_summarize}/work
ref=${TEST_TMP:-/tmp/gpu_summarize}/ref
rm -rf "$w" "$ref"
mkdir -p "$w/tests" "$w/train/r1" "$w/train/r2" "$w/peers" "$ref"
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "meshtrain fixture" > "$w/BUILD_INFO.txt"
echo "PASS fused.one (fine)" > "$w/selfcheck.txt"
echo 0 > "$w/selfcheck_status.txt"
echo "test_x 0" > "$w/tests/status.txt"
echo "[==========] 3 tests from 1 test suite ran. (5 ms total)" > "$w/tests/test_x.log"
echo '{"results": [{"m": 8, "n": 8, "k": 8, "best_flops_min": 2e12}]}' > "$w/gemm_bf16.json"
printf 'r1\nr2\n' > "$w/train/runs.txt"
# r1: 1000 tokens/s after the 2 warm-up steps; r2: 3000.
for r in r1 r2; do
  tps=$([[ $r == r1 ]] && echo 1000 || echo 3000)
  for s in 1 2 3 4 5 6; do
    echo "{\"step\": $s, \"loss\": $(echo "10 - $s * 0.1" | bc), \"tokens_per_s\": $([[ $s -le 2 ]] && echo 10 || echo $tps), \"step_time_s\": 0.5, \"mfu\": 0.25, \"peak_mem_bytes\": 1048576}"
  done > "$w/train/$r/metrics.jsonl"
  echo 0 > "$w/train/$r/status.txt"
done
# r1 replayed steps 3-6 from a CUDA graph (gpu.graphs), and its log says so.
sed -i -E 's/^(\{"step": [3-6],)/\1 "cuda_graph": true,/' "$w/train/r1/metrics.jsonl"
printf '[rank 0] gpu.graphs: one step captured into a CUDA graph after the first eager steps, then replayed\n' > "$w/train/r1/train.log"
# r1's reference within 1e-2 (0.5% off), r2's 5% off at step 3.
python3 - "$ref" <<'PY'
import json, sys
d = sys.argv[1]
json.dump({"how": "fixture", "losses": [[s, (10 - 0.1 * s) * 1.005] for s in range(1, 4)]}, open(d + "/r1.json", "w"))
json.dump({"how": "fixture", "losses": [[s, (10 - 0.1 * s) * (1.05 if s == 3 else 1)] for s in range(1, 4)]}, open(d + "/r2.json", "w"))
PY
# eager: r1 at 500 tokens/s, then stopped at validate.sh's limit (124) before r2; compile: SKIP.
echo '{"torch": "9.9", "device_name": "fixture", "gqa": "native", "runs": [{"name": "r1", "status": "PASS", "tokens_per_s": 500.0, "peak_mem_bytes": 2097152, "flops_per_token": 1e9}]}' > "$w/peers/torch_eager.json"
echo 124 > "$w/peers/torch_eager.status"
echo '{"torch": "9.9", "runs": [{"name": "r1", "status": "SKIP", "reason": "no torch.compile"}, {"name": "r2", "status": "SKIP", "reason": "no torch.compile"}]}' > "$w/peers/torch_compile.json"
echo 0 > "$w/peers/torch_compile.status"
echo "PASS ERROR SUMMARY: 0 errors" > "$w/sanitizer_status.txt"
echo "PASS 6 steps" > "$w/kernel_profile_status.txt"
cat > "$w/kernel_timer.txt" <<'KP'
Regions:

- Kernels::attention_forward
 (REGION)   0.500000 12 0.041667 50.000000 10.000000

Kernels:

- Kernels::small
 (ParFor)   0.100000 10 0.010000 10.000000 2.000000
- Kernels::big
 (ParRed)   0.900000 3 0.300000 90.000000 18.000000

Summary:
KP
# `meshtrain plan` of each run (validate.sh plan_run): r1 predicts 0.55 s against the measured
# 0.5 s (+10%: PASS), r2 0.7 s (+40%: OFF, a measurement, not a failed run).
for r in r1 r2; do
  pred=$([[ $r == r1 ]] && echo 0.55 || echo 0.7)
  echo "{\"chosen\": {\"strategy\": \"no_shard\", \"step_s\": $pred, \"compute_s\": $pred}}" > "$w/train/$r/plan.json"
  echo PASS > "$w/train/$r/plan_status.txt"
done
printf 'mesh 1 (dp_replicate) x 1 (dp_shard) x 1 (tp), strategy no_shard (fixture)\n' >> "$w/train/r1/train.log"

python3 "$S" --work "$w" --table "$w/table.txt" --json "$w/results.json" --reference-dir "$ref" ||
  fail "summarize.py exited $?"
python3 - "$w/results.json" <<'PY' || fail "results.json (first pass)"
import json, sys
r = json.load(open(sys.argv[1]))
def check(cond, what):
    if not cond:
        sys.exit("results.json: " + what)
check(r["train"]["tokens_per_s_median"] == 1000, "train = the first run, median after warm-up")
check(r["runs"]["r2"]["train"]["tokens_per_s_median"] == 3000, "every run under runs")
check(r["runs"]["r1"]["train"]["loss_check"]["status"] == "PASS", "r1 within 1e-2 of its reference")
check(r["runs"]["r2"]["train"]["loss_check"]["status"] == "FAIL", "r2 5% off its reference")
check(r["runs"]["r2"]["train"]["loss_check"]["steps_compared"] == 3, "only common steps compared")
check(r["peers"]["torch_eager"]["tokens_per_s"] == 500, "peers.torch_eager.tokens_per_s = r1's")
check(r["train"]["vs_torch_eager"] == 2.0, "meshtrain/eager = 1000/500")
check(abs(r["peers"]["torch_eager"]["runs"]["r1"]["mfu"] - 500 * 1e9 / 2e12) < 1e-12, "peer MFU vs the measured peak")
check(r["peers"]["torch_eager"]["runs"]["r2"]["status"] == "SKIP", "a run the stopped peer never reached is SKIP")
check(r["peers"]["torch_compile"]["status"] == "SKIP" and r["peers"]["torch_compile"]["tokens_per_s"] is None, "compile SKIP")
check(r["train"]["vs_torch_compile"] is None, "no ratio without a compile number")
check(r["sanitizer"]["status"] == "PASS", "sanitizer")
check(r["peers"]["torch_eager"]["gqa"] == "native" and r["peers"]["torch_compile"]["gqa"] is None, "the peers' GQA")
k = r["kernel_profile"]
check([x["name"] for x in k["kernels"]] == ["Kernels::big", "Kernels::small"], "kernels sorted by time")
check(k["kernels"][0]["calls"] == 3 and k["kernels"][0]["pct_of_kernels"] == 90, "kernel row fields")
check(k["regions"][0]["name"] == "Kernels::attention_forward", "regions")
check(r["paths"] == {"fused.one": "PASS"}, "paths")
check(r["fallback"] == [], "no fallback.txt: no keys")
check(r["train"]["cuda_graph_steps"] == 4 and r["runs"]["r2"]["train"]["cuda_graph_steps"] == 0, "CUDA graph steps")
check(r["train"]["graphs"].startswith("one step captured"), "the trainer's gpu.graphs line")
check(r["runs"]["r2"]["train"]["graphs"] == "not in the log", "no gpu.graphs line")
p1, p2 = r["runs"]["r1"]["train"]["plan"], r["runs"]["r2"]["train"]["plan"]
check(p1["status"] == "PASS" and abs(p1["error"] - 0.1) < 1e-12 and p1["strategy"] == "no_shard", "plan +10%: PASS")
check(p2["status"] == "OFF" and abs(p2["error"] - 0.4) < 1e-12, "plan +40%: OFF")
check(r["train"]["plan"]["status"] == "PASS", "the headline run's plan check")
check(r["ok"] is False, "a loss outside its tolerance fails the verdict")
PY
grep -q "^plan     PASS predicted 550.0 ms, measured 500.0 ms: +10.0% (limit +-15%)" "$w/table.txt" ||
  fail "the table sets plan's step beside the measured one"
# A plan that chose another strategy than the run is no comparison: FAIL, said so.
sed -i 's/"no_shard"/"full_shard"/' "$w/train/r1/plan.json"
python3 "$S" --work "$w" --table "$w/table.txt" --json "$w/results.json" --reference-dir "$ref" || fail "plan pass"
python3 -c "
import json, sys
p = json.load(open('$w/results.json'))['train']['plan']
sys.exit(0 if p['status'] == 'FAIL' and 'plan chose full_shard, the run no_shard' in p['detail'] else 1)" ||
  fail "a plan of another strategy is refused"
grep -q "\`meshtrain plan\` of a run failed" "$w/table.txt" || fail "a failed plan fails the verdict"
sed -i 's/"full_shard"/"no_shard"/' "$w/train/r1/plan.json"
grep -q "verdict  FAIL: a loss left the CPU fp32 reference's tolerance" "$w/table.txt" || fail "the table's verdict names the loss"
grep -qE "^r1 .* 2\.00x " "$w/table.txt" || fail "the table's r1 row shows meshtrain/eager 2.00x"
grep -q "torch_eager: torch 9.9 on fixture, GQA native" "$w/table.txt" || fail "the table names the peer's GQA"
grep -q "^graphs   4 of 6 steps replayed from a CUDA graph (gpu.graphs: one step captured" "$w/table.txt" ||
  fail "the table says how many steps the CUDA graph replayed"

# r2's reference fixed: PASS. Then a FAILed compile peer fails the verdict; SKIP does not.
python3 -c "
import json; json.dump({'how': 'fixture', 'losses': [[s, 10 - 0.1 * s] for s in range(1, 4)]}, open('$ref/r2.json', 'w'))"
python3 "$S" --work "$w" --table "$w/table.txt" --json "$w/results.json" --reference-dir "$ref" || fail "second pass"
python3 -c "import json,sys; sys.exit(0 if json.load(open('$w/results.json'))['ok'] else 1)" || fail "every check passes: ok"
sed -i 's/"status": "SKIP", "reason": "no torch.compile"}, {"name": "r2"/"status": "FAIL", "reason": "boom"}, {"name": "r2"/' "$w/peers/torch_compile.json"
python3 "$S" --work "$w" --table "$w/table.txt" --json "$w/results.json" --reference-dir "$ref" || fail "third pass"
python3 -c "import json,sys; sys.exit(1 if json.load(open('$w/results.json'))['ok'] else 0)" || fail "a FAILed peer fails the verdict"
grep -q "a PyTorch peer failed" "$w/table.txt" || fail "the table names the failed peer"

# Without a reference the check is SKIP (never PASS), and the verdict does not fail for it.
rm "$ref/r1.json"
sed -i 's/"status": "FAIL", "reason": "boom"/"status": "SKIP", "reason": "x"/' "$w/peers/torch_compile.json"
python3 "$S" --work "$w" --table "$w/table.txt" --json "$w/results.json" --reference-dir "$ref" || fail "fourth pass"
python3 -c "
import json, sys
r = json.load(open('$w/results.json'))
sys.exit(0 if r['runs']['r1']['train']['loss_check']['status'] == 'SKIP' and r['ok'] else 1)" || fail "no reference: SKIP"

# The keys validate.sh gave the runs for the paths that did not pass (fallback.txt).
printf 'gpu.fused_loss=false\tfused_loss.cross_entropy FAIL\n' > "$w/fallback.txt"
python3 "$S" --work "$w" --table "$w/table.txt" --json "$w/results.json" --reference-dir "$ref" || fail "fallback pass"
python3 -c "
import json, sys
r = json.load(open('$w/results.json'))
sys.exit(0 if r['fallback'] == [{'key': 'gpu.fused_loss=false', 'why': 'fused_loss.cross_entropy FAIL'}] else 1)" ||
  fail "results.json lists the fallback keys"
grep -q "^fallback every meshtrain run below ran without the paths that did not pass" "$w/table.txt" &&
  grep -q "^         --gpu.fused_loss=false (fused_loss.cross_entropy FAIL)" "$w/table.txt" ||
  fail "the table names the fallback keys and why"

# --make-reference: the losses of a metrics file; one without losses is refused.
python3 "$S" --make-reference "$w/train/r1/metrics.jsonl" --how "fixture" > "$w/made.json" || fail "--make-reference"
python3 -c "
import json, sys
j = json.load(open('$w/made.json'))
sys.exit(0 if j['losses'][0] == [1, 9.9] and len(j['losses']) == 6 and j['how'] == 'fixture' else 1)" || fail "made reference"
: > "$w/empty.jsonl"
if python3 "$S" --make-reference "$w/empty.jsonl" > /dev/null 2> "$w/err.txt"; then fail "an empty metrics file was accepted"; fi
grep -q "has no losses" "$w/err.txt" || fail "the refusal says why"
echo "gpu_summarize: all checks passed"
