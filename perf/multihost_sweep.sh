#!/usr/bin/env bash
# perf/multihost_sweep.sh [OUT_DIR]: the measurement harness for a slow inter-node link
# (issue 17). Builds HOSTS namespace hosts (tests/multihost/cluster.sh) with every host's
# link shaped by tc (RATE with tbf, DELAY with netem where the kernel has sch_netem; the
# qdiscs really applied are recorded in setup.txt), then measures on it:
#
#   comm   `meshtrain bench comm` with a mesh of dp_replicate=HOSTS x dp_shard=PER_HOST:
#          the dp_shard groups stay inside a host (shared memory), the dp_replicate groups
#          cross hosts (the shaped TCP link): intra- vs inter-node time and bus bandwidth
#          for all_gather, reduce_scatter and all_reduce;
#   runs   `meshtrain train` STEPS steps for each (strategy, mesh) in MESHES, REPEATS times
#          (round robin over the meshes, so a disturbance of the shared machine spreads over
#          all of them), with the step times, exposed communication and the mesh line kept;
#   plans  `meshtrain plan --json` for the same strategy and mesh before each run, given the
#          measured intra/inter bus bandwidths (--plan.bus_gbps=intra,inter).
#
# perf/multihost_summary.py then compares them: each configuration's median measured step
# against its median prediction (within 20%?) and the measured ranking against the predicted
# one. Needs root. Results: OUT_DIR/comm/*.csv, OUT_DIR/runs/NAME-rK.log + metrics.jsonl,
# OUT_DIR/plans/NAME-rK.json/.txt, OUT_DIR/summary.csv/.md/.json, OUT_DIR/predicted.png.
# Environment: MESHTRAIN, HOSTS (2), PER_HOST (2), RATE (1gbit), DELAY (0.2ms), STEPS (8),
# WARMUP (2), REPEATS (3), CONFIG (inputs/tiny-gpt2.ini), MODEL_ARGS ("--model.d_model=256
# --model.n_layers=4"), MESHES (see below), PERF_MAX_LOAD (1.5); for trying the script out
# (tests/perf/multihost_dry_run.sh), not for results: COMM_MAX_BYTES (16MiB; the bandwidths
# given to the plans are the median over the sizes from 1 MiB up, so at least 1MiB).
# A plan or run that fails is reported and the others still run; the run then ends with exit 1
# and leaves the previous results as they were, its own in OUT_DIR.partial (perf/common.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=${1:-$ROOT/perf/results/multihost_sweep}
HOSTS=${HOSTS:-2}
PER_HOST=${PER_HOST:-2}
RATE=${RATE:-1gbit}
DELAY=${DELAY:-0.2ms}
STEPS=${STEPS:-8}
REPEATS=${REPEATS:-3}
WARMUP=${WARMUP:-2}
COMM_MAX_BYTES=${COMM_MAX_BYTES:-16MiB}
CONFIG=${CONFIG:-$ROOT/inputs/tiny-gpt2.ini}
read -r -a MODEL_ARGS <<<"${MODEL_ARGS:---model.d_model=256 --model.n_layers=4}"
N=$((HOSTS * PER_HOST))
# strategy:dp_replicate:dp_shard:tp (tp stays inside a host)
read -r -a MESHES <<<"${MESHES:-full_shard:1:$N:1 hybrid_shard:$HOSTS:$PER_HOST:1 shard_grad_op:1:$N:1 no_shard:1:$N:1 full_shard:1:$HOSTS:$PER_HOST no_shard:1:$HOSTS:$PER_HOST}"

# The intra-host bandwidth the plans are given is measured between a host's ranks.
((PER_HOST >= 2)) || { echo "perf: PER_HOST must be at least 2 (it is $PER_HOST)" >&2; exit 2; }
source "$ROOT/tests/multihost/cluster.sh"
if ! reason=$(cluster_check); then echo "perf: $reason" >&2; exit 2; fi
# Into a staging directory: OUT_DIR is replaced only when the run finished (perf/common.sh).
FINAL_OUT=$OUT
OUT=$(stage_results "$FINAL_OUT") && mkdir -p "$OUT/comm" "$OUT/runs" "$OUT/plans"
cluster_up "$HOSTS"
cluster_shape "$RATE" "$DELAY"
export OMP_NUM_THREADS OPENBLAS_NUM_THREADS OMP_PROC_BIND
echo "perf: $HOSTS hosts x $PER_HOST ranks, inter-host links shaped to $RATE (tc tbf), +$DELAY (tc netem, where the kernel has it)" | tee "$OUT/setup.txt"
tc -n "${CLUSTER_HOSTS[0]}" qdisc show dev eth0 | tee -a "$OUT/setup.txt"  # what was really applied

# ---- comm: intra (dp_shard, inside a host) vs inter (dp_replicate, across hosts) ----------
wait_quiet || true
for g in dp_shard dp_replicate; do
  cluster_mpirun "$PER_HOST" -- "$MESHTRAIN" bench comm --ops all_gather,reduce_scatter,all_reduce \
    --group "$g" --parallel.dp_replicate="$HOSTS" --parallel.dp_shard="$PER_HOST" --parallel.tp=1 \
    --min_bytes 4KiB --max_bytes "$COMM_MAX_BYTES" --warmup 2 --iters 5 --csv "$OUT/comm/$g.csv" >"$OUT/comm/$g.txt" 2>&1 ||
    { tail "$OUT/comm/$g.txt" >&2; exit 1; }
done
# All-reduce bus bandwidth per group, the median over 1-16 MiB (the sizes FSDP moves per unit
# here; one size alone swung 30% between sweeps on the shared link): the plan's 'intra,inter'.
bw=$("$PY" - "$OUT/comm" <<'EOF'
import csv, os, statistics, sys
d = sys.argv[1]
def busbw(g):
    rows = [r for r in csv.DictReader(open(os.path.join(d, g + ".csv")))
            if r["op"] == "all_reduce" and int(r["bytes"]) >= 1 << 20]
    return statistics.median(float(r["busbw_bytes_per_s"]) for r in rows) / 1e9
print(f"{busbw('dp_shard'):.4g},{busbw('dp_replicate'):.4g}")
EOF
) || bw=""
echo "measured all_reduce bus bandwidth intra,inter (GB/s, median over 1-16 MiB): ${bw:-unavailable}" | tee -a "$OUT/setup.txt"

# ---- runs and plans ---------------------------------------------------------------------------
failed=0
for ((rep = 1; rep <= REPEATS; rep++)); do
  for m in "${MESHES[@]}"; do
    IFS=: read -r strat rep_n shard tp <<<"$m"
    name="$strat-${rep_n}x${shard}x${tp}"
    mesh=(--parallel.strategy="$strat" --parallel.dp_replicate="$rep_n" --parallel.dp_shard="$shard" --parallel.tp="$tp")
    wait_quiet || true
    cluster_mpirun "$PER_HOST" -- "$MESHTRAIN" plan "$CONFIG" "${MODEL_ARGS[@]}" "${mesh[@]}" \
      ${bw:+--plan.bus_gbps="$bw"} --json "$OUT/plans/$name-r$rep.json" >"$OUT/plans/$name-r$rep.txt" 2>&1 ||
      { echo "perf: plan $name failed" >&2; failed=1; }
    echo "$(load1)" >"$OUT/runs/$name-r$rep.load"
    cluster_mpirun "$PER_HOST" -- "$MESHTRAIN" train "$CONFIG" "${MODEL_ARGS[@]}" "${mesh[@]}" --data.dir=random \
      --train.steps="$STEPS" --train.eval_every=0 --checkpoint.save_final=false --output.dir="$OUT/runs/$name-r$rep" \
      >"$OUT/runs/$name-r$rep.log" 2>&1 || { tail "$OUT/runs/$name-r$rep.log" >&2; echo "perf: run $name failed" >&2; failed=1; }
    echo "perf: repeat $rep $name done (load $(load1))"
  done
done
printf '%s\n' "${MESHES[@]}" >"$OUT/meshes.txt"
"$PY" "$PERF_DIR/multihost_summary.py" "$OUT" "$WARMUP"
if ((failed)); then
  echo "perf: a plan or run failed (above); the previous results are kept, this run's are in $OUT" >&2
  exit 1
fi
publish_results "$OUT" "$FINAL_OUT"
