#!/usr/bin/env bash
# perf/bench_ab.sh [OUT_DIR]: two meshtrain binaries side by side on inputs/bench-gpt2-23m.ini,
# 1 rank no_shard and 2 ranks full_shard, REPS runs each, alternating which binary goes first
# (so drift of the shared machine hits both alike). For "this change does not slow the step
# down": BASELINE (required) is the binary before the change, MESHTRAIN the one after. Each
# run's number is the median step time after WARMUP steps; the final losses must be equal.
# Results: OUT_DIR/runs.csv and results.md. Environment: BASELINE, MESHTRAIN, REPS (6),
# STEPS (8), WARMUP (3), THREADS (1), PERF_MAX_LOAD.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=${1:-$ROOT/perf/results/bench_ab}
[[ -x ${BASELINE:-} ]] || { echo "perf/bench_ab.sh: set BASELINE to the binary to compare against" >&2; exit 2; }
REPS=${REPS:-6}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
rm -rf "$OUT" && mkdir -p "$OUT/runs"
echo "binary,ranks,strategy,rep,median_step_s,final_loss,load1" >"$OUT/runs.csv"
for ((rep = 1; rep <= REPS; rep++)); do
  order=(baseline candidate)
  ((rep % 2 == 0)) && order=(candidate baseline)
  for cfg in "1 no_shard" "2 full_shard"; do
    read -r n strat <<<"$cfg"
    for which in "${order[@]}"; do
      bin=$MESHTRAIN
      [[ $which == baseline ]] && bin=$BASELINE
      run="$OUT/runs/$which-$n-$strat-r$rep"
      wait_quiet || true
      mpirun_n "$n" "$bin" train "$ROOT/inputs/bench-gpt2-23m.ini" --data.dir=random --train.steps="$STEPS" \
        --train.eval_every=0 --checkpoint.save_final=false --parallel.strategy="$strat" --parallel.dp_shard="$n" \
        --parallel.tp=1 --output.dir="$run" >"$run.log" 2>&1 || { tail "$run.log" >&2; exit 1; }
      "$PY" - "$run/metrics.jsonl" "$WARMUP" "$which,$n,$strat,$rep" "$(load1)" >>"$OUT/runs.csv" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
kept = [r["step_time_s"] for r in rows if r["step"] > int(sys.argv[2])]
print(f"{sys.argv[3]},{statistics.median(kept):.4f},{rows[-1]['loss']!r},{sys.argv[4]}")
PY
      tail -n1 "$OUT/runs.csv"
    done
  done
done
"$PY" - "$OUT/runs.csv" "$OUT/results.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out = ["| ranks | strategy | baseline step s (median; min-max) | candidate step s (median; min-max) | candidate / baseline | final losses equal |",
       "|---|---|---|---|---|---|"]
ok = True
for n, s in (("1", "no_shard"), ("2", "full_shard")):
    b = [r for r in rows if r["binary"] == "baseline" and r["ranks"] == n]
    c = [r for r in rows if r["binary"] == "candidate" and r["ranks"] == n]
    bt = [float(r["median_step_s"]) for r in b]; ct = [float(r["median_step_s"]) for r in c]
    same = len({r["final_loss"] for r in b + c}) == 1
    ok &= same
    out.append(f"| {n} | {s} | {statistics.median(bt):.3f} ({min(bt):.3f}-{max(bt):.3f}) | {statistics.median(ct):.3f} "
               f"({min(ct):.3f}-{max(ct):.3f}) | {statistics.median(ct) / statistics.median(bt):.3f} | {'yes' if same else '**no**'} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
sys.exit(0 if ok else 1)
PY
