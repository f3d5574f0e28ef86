#!/usr/bin/env bash
# perf/compare_plans.sh OLD NEW [OUT_DIR]: `meshtrain plan --json` of two binaries for the
# Llama-8B shapes of doc/perf.md / tests/parallel/plan_weak_scaling.sh (inputs/llama-8b-plan.ini:
# every cost input given, nothing measured) at 8, 64 and 1024 GPUs, plus a fixed strategy and
# mesh at 64. Compares the pick (strategy, mesh, checkpointing, micro-batch, step time) and
# every candidate's predicted step time and memory; prints what differs. Exit status 1 when
# anything does, 2 when a plan fails.
set -euo pipefail
OLD=${1:?usage: perf/compare_plans.sh OLD NEW [OUT_DIR]}
NEW=${2:?usage: perf/compare_plans.sh OLD NEW [OUT_DIR]}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=${3:-$ROOT/perf/results/compare_plans}
# Into a staging directory: OUT_DIR is replaced only when the run finished (perf/common.sh).
FINAL_OUT=$OUT
OUT=$(stage_results "$FINAL_OUT")
runs=("8|" "64|" "1024|"
      "64-fixed|--parallel.strategy=full_shard --parallel.dp_replicate=1 --parallel.dp_shard=64 --parallel.tp=1 --train.activation_checkpointing=true")
failed=0
for r in "${runs[@]}"; do
  IFS='|' read -r name extra <<<"$r"
  n=${name%%-*}
  read -r -a extra_args <<<"$extra"
  for which in old new; do
    bin=$OLD
    [[ $which == new ]] && bin=$NEW
    "$bin" plan "$ROOT/inputs/llama-8b-plan.ini" --plan.world_size="$n" --train.global_batch="$n" "${extra_args[@]}" \
      --json "$OUT/$name-$which.json" >"$OUT/$name-$which.txt" 2>&1 || {
      status=$?
      echo "compare_plans: the ${which^^} binary's plan for $name failed (exit status $status; $OUT/$name-$which.txt):" >&2
      tail -5 "$OUT/$name-$which.txt" >&2
      exit 2
    }
  done
  "$PY" - "$OUT/$name-old.json" "$OUT/$name-new.json" "$name" <<'PY' || failed=1
import json, sys
a, b, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
KEY = ("strategy", "dp_replicate", "dp_shard", "tp", "activation_checkpointing", "micro_batch")
def key(c):
    return tuple(c[k] for k in KEY)
def pick(p):
    c = p.get("chosen")
    return None if c is None else (key(c), round(c["step_s"], 12), c["memory_bytes"])
bad = []
if pick(a) != pick(b):
    bad.append(f"chosen: {pick(a)} vs {pick(b)}")
ca = {key(c): (c["step_s"], c["memory_bytes"], c["fits"]) for c in a["candidates"]}
cb = {key(c): (c["step_s"], c["memory_bytes"], c["fits"]) for c in b["candidates"]}
if set(ca) != set(cb):
    bad.append(f"candidate sets differ: {len(ca)} vs {len(cb)}; only old: {sorted(set(ca) - set(cb))[:5]}, "
               f"only new: {sorted(set(cb) - set(ca))[:5]}")
diff = [k for k in set(ca) & set(cb) if ca[k] != cb[k]]
if diff:
    bad.append(f"{len(diff)} candidates predict differently, e.g. {diff[0]}: {ca[diff[0]]} vs {cb[diff[0]]}")
ua, ub = a.get("best_unrestricted"), b.get("best_unrestricted")
if (ua and key(ua)) != (ub and key(ub)):
    bad.append(f"best_unrestricted: {ua and key(ua)} vs {ub and key(ub)}")
c = a.get("chosen")
print(f"{name}: {'identical' if not bad else 'DIFFERS'}: {len(ca)} candidates; "
      + (f"chosen {key(c)} at {c['step_s']:.6f} s" if c else "none chosen"))
for m in bad:
    print("  " + m)
sys.exit(1 if bad else 0)
PY
done
# A difference is this run's result: published too (the exit status says so).
publish_results "$OUT" "$FINAL_OUT"
exit $failed
