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
