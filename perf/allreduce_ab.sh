#!/usr/bin/env bash
# perf/allreduce_ab.sh [OUT_DIR]: the MPI all-reduce algorithms side by side on the shaped
# namespace cluster (as perf/multihost_sweep.sh builds it): each (strategy, mesh) in MESHES
# trains STEPS steps with every libnbc iallreduce algorithm in ALGS (0: libnbc's own choice,
# a binomial tree for meshtrain's in-place buffers; 3: halving-doubling, what meshtrain's
# Runtime selects; 1: a ring), REPS times, rotating the order. Each run's number is its median
# step time after WARMUP steps; the final losses are kept to show they agree. Needs root.
# Results: OUT_DIR/runs.csv and results.md. Environment: HOSTS (2), PER_HOST (2), RATE
# (1gbit), DELAY (0.2ms), STEPS (8), WARMUP (2), REPS (3), ALGS ("0 3 1"), CONFIG, MODEL_ARGS,
# MESHES ("no_shard:1:2:2 hybrid_shard:2:2:1 no_shard:1:4:1": strategy:dp_replicate:dp_shard:tp).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=${1:-$ROOT/perf/results/allreduce_ab}
HOSTS=${HOSTS:-2}
PER_HOST=${PER_HOST:-2}
RATE=${RATE:-1gbit}
DELAY=${DELAY:-0.2ms}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-2}
REPS=${REPS:-3}
read -r -a ALGS <<<"${ALGS:-0 3 1}"
CONFIG=${CONFIG:-$ROOT/inputs/tiny-gpt2.ini}
read -r -a MODEL_ARGS <<<"${MODEL_ARGS:---model.d_model=256 --model.n_layers=4}"
read -r -a MESHES <<<"${MESHES:-no_shard:1:2:2 hybrid_shard:2:2:1 no_shard:1:4:1}"

source "$ROOT/tests/multihost/cluster.sh"
if ! reason=$(cluster_check); then echo "perf: $reason" >&2; exit 2; fi
# Into a staging directory: OUT_DIR is replaced only when the run finished (perf/common.sh).
FINAL_OUT=$OUT
OUT=$(stage_results "$FINAL_OUT") && mkdir -p "$OUT/runs"
cluster_up "$HOSTS"
cluster_shape "$RATE" "$DELAY"
export OMP_NUM_THREADS OPENBLAS_NUM_THREADS OMP_PROC_BIND
echo "strategy,mesh,algorithm,rep,median_step_s,final_loss,load1" >"$OUT/runs.csv"
for ((rep = 1; rep <= REPS; rep++)); do
  # rotate the algorithms' order by repeat, so drift of the shared machine spreads over all
  order=("${ALGS[@]:$(((rep - 1) % ${#ALGS[@]}))}" "${ALGS[@]:0:$(((rep - 1) % ${#ALGS[@]}))}")
  for m in "${MESHES[@]}"; do
    IFS=: read -r strat rep_n shard tp <<<"$m"
    for alg in "${order[@]}"; do
      name="$strat-${rep_n}x${shard}x${tp}-alg$alg-r$rep"
      wait_quiet || true
      cluster_mpirun "$PER_HOST" --mca coll_libnbc_iallreduce_algorithm "$alg" -- "$MESHTRAIN" train "$CONFIG" \
        "${MODEL_ARGS[@]}" --parallel.strategy="$strat" --parallel.dp_replicate="$rep_n" --parallel.dp_shard="$shard" \
        --parallel.tp="$tp" --data.dir=random --train.steps="$STEPS" --train.eval_every=0 \
        --checkpoint.save_final=false --output.dir="$OUT/runs/$name" >"$OUT/runs/$name.log" 2>&1 ||
        { tail "$OUT/runs/$name.log" >&2; exit 1; }
      "$PY" "$PERF_DIR/perfutil.py" run_row "$OUT/runs/$name/metrics.jsonl" "$WARMUP" "$strat,${rep_n}x${shard}x${tp},$alg,$rep" "$(load1)" \
        >>"$OUT/runs.csv"
      tail -n1 "$OUT/runs.csv"
    done
  done
done
"$PY" - "$OUT/runs.csv" "$OUT/results.md" "$RATE" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
names = {"0": "libnbc's own (binomial tree)", "1": "ring", "3": "halving-doubling"}
algs = list(dict.fromkeys(r["algorithm"] for r in rows))
out = [f"Median step time (s; min-max over repeats) per libnbc iallreduce algorithm, 2 namespace hosts, {sys.argv[3]} link.", "",
       "| strategy | mesh | " + " | ".join(names.get(a, a) for a in algs) + " | binomial / halving-doubling | final losses |",
       "|---|---|" + "---|" * len(algs) + "---|---|"]
for key in dict.fromkeys((r["strategy"], r["mesh"]) for r in rows):
    mine = [r for r in rows if (r["strategy"], r["mesh"]) == key]
    med = {}
    cells = []
    for a in algs:
        t = [float(r["median_step_s"]) for r in mine if r["algorithm"] == a]
        med[a] = statistics.median(t)
        cells.append(f"{med[a]:.3f} ({min(t):.3f}-{max(t):.3f})")
    ratio = f"{med['0'] / med['3']:.2f}x" if "0" in med and "3" in med else "-"
    losses = {r["final_loss"] for r in mine}
    same = "equal" if len(losses) == 1 else f"{len(losses)} values, spread {max(map(float, losses)) - min(map(float, losses)):.1e}"
    out.append(f"| {key[0]} | {key[1].replace('x', ' x ')} | " + " | ".join(cells) + f" | {ratio} | {same} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
publish_results "$OUT" "$FINAL_OUT"
