#!/usr/bin/env bash
# The planner chooses the mesh for a Llama-3-8B-shaped model on 80 GiB / 700 TFLOP/s GPUs,
# 8 per node, 150 / 25 GB/s intra / inter-node (inputs/llama-8b-plan.ini), weak scaling
# with one sequence per GPU per step at 8, 64 and 1024 GPUs:
#   * `plan --json` writes every candidate and the pick;
#   * the pick is the fastest predicted candidate among those that fit (check_plan.py);
#   * tensor parallelism never leaves a node, no candidate exceeds the world;
#   * the chosen step times give a predicted weak-scaling efficiency 8 -> 1024 GPUs >= 95%.
# Environment (set by meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -euo pipefail
bin=$MESHTRAIN_BIN
src=$MESHTRAIN_SOURCE_DIR
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
jsons=()
for n in 8 64 1024; do
  # One rank plans the target cluster (nothing is measured: every cost input is given).
  "$bin" plan "$src/inputs/llama-8b-plan.ini" --plan.world_size=$n --train.global_batch=$n \
    --json "$TEST_TMP/plan_$n.json" > "$TEST_TMP/plan_$n.txt"
  grep -q "^chosen: " "$TEST_TMP/plan_$n.txt" || { echo "FAIL: plan at $n GPUs printed no 'chosen:' line"; exit 1; }
  jsons+=("$TEST_TMP/plan_$n.json")
done
/usr/bin/python3 "$src/tests/parallel/check_plan.py" --min-efficiency 0.95 "${jsons[@]}"
# A fixed strategy and mesh: `chosen` is what `train` would run (the configured one, with its
# prediction), and the unrestricted best is reported apart, under `best_unrestricted`.
"$bin" plan "$src/inputs/llama-8b-plan.ini" --plan.world_size=64 --train.global_batch=64 \
  --parallel.strategy=full_shard --parallel.dp_replicate=1 --parallel.dp_shard=64 --parallel.tp=1 --train.activation_checkpointing=true \
  --json "$TEST_TMP/plan_fixed.json" > "$TEST_TMP/plan_fixed.txt"
/usr/bin/python3 - "$TEST_TMP/plan_fixed.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
c = p["chosen"]
got = (c["strategy"], c["dp_replicate"], c["dp_shard"], c["tp"])
if got != ("full_shard", 1, 64, 1):
    sys.exit(f"FAIL: a fixed full_shard 1 x 64 x 1 plan wrote chosen = {got}")
if any(k["strategy"] != "full_shard" or k["dp_shard"] != 64 for k in p["candidates"]):
    sys.exit("FAIL: a fixed plan listed candidates outside the configured strategy and mesh")
b = p.get("best_unrestricted")
if not b or b["step_s"] > c["step_s"] + 1e-12:
    sys.exit("FAIL: best_unrestricted missing, or slower than the configured choice")
print(f"fixed plan: chosen full_shard 1 x 64 x 1 at {c['step_s']:.3f} s; unrestricted best {b['strategy']} "
      f"{b['dp_replicate']} x {b['dp_shard']} x {b['tp']} at {b['step_s']:.3f} s")
PY
