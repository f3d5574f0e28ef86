#!/usr/bin/env bash
# perf/sweep.sh [OUT_DIR]: the CPU scaling sweep (issue 8) on inputs/bench-gpt2-23m.ini, in one
# run with its ceilings, in well under 20 minutes on a 2-core machine:
#
#   ceilings   SGEMM peak and copy bandwidth at 1, 2 and 4 ranks running at once
#   comm       meshtrain bench comm: all four collectives 1 KiB..64 MiB at 2 and 4 ranks (world)
#              and over the tp groups of a 4-rank tp=2 mesh; data checked (zero wrong results)
#   runs       ranks {1,2,4} x strategy {full_shard, shard_grad_op, no_shard} x tp {1,2}
#              (strategies coincide when the data-parallel degree is 1: run once, as no_shard),
#              strong scaling (global batch STRONG_GLOBAL sequences, fixed) and weak scaling
#              (MICRO sequences per data-parallel rank); `meshtrain plan` before each mesh
#              records the cost model's predicted step time next to the measured one
#   peer       PyTorch DDP (gloo) at 1, 2 and 4 ranks with the same per-rank batch, both modes
#
# Then perf/collect.py writes sweep.csv (every logged step of every run), summary.csv/.md and
# perf/plot.py the PNGs. Environment: MESHTRAIN, THREADS (1), STEPS (6), WARMUP (2),
# MICRO (2), STRONG_GLOBAL (8), PERF_NATIVE_BLAS (1), PERF_MAX_LOAD (1.5), PERF_IDLE_MAX; for
# trying the script out (tests/perf/sweep_dry_run.sh), not for results: SWEEP_RANKS ("1 2 4"),
# CEILING_SHAPES (1024,2048) and CEILING_SECONDS (0.7), COMM_MAX (64MiB) and COMM_TP_MAX (16MiB),
# MODEL_ARGS and PEER_ARGS (below).
#
# Back of the envelope: 148 MFLOP per token (fwd+bwd); a strong-scaling step is 8 x 256 tokens
# = 0.30 TFLOP, ~2.5 s on one core at ~120 GFLOP/s, ~1.3 s on two; 30 train runs of ~6 steps
# plus start-up, 10 plans and 6 PyTorch runs come to ~12-15 minutes.
#
# perf/sweep.sh --hosts N [--per-host K] [OUT_DIR]: the same question on N namespace hosts with
# shaped links instead (perf/multihost_sweep.sh: needs root; RATE, DELAY, REPEATS, MESHES there).
set -euo pipefail
if [[ ${1:-} == --hosts ]]; then
  [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "perf/sweep.sh: --hosts needs a number of hosts, e.g. --hosts 2" >&2; exit 2; }
  export HOSTS=$2
  shift 2
  if [[ ${1:-} == --per-host ]]; then
    [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "perf/sweep.sh: --per-host needs a number of ranks per host" >&2; exit 2; }
    export PER_HOST=$2
    shift 2
  fi
  exec bash "$(dirname "${BASH_SOURCE[0]}")/multihost_sweep.sh" "$@"
fi
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=${1:-$ROOT/perf/results/sweep}
STEPS=${STEPS:-6}
WARMUP=${WARMUP:-2}
MICRO=${MICRO:-2}
STRONG_GLOBAL=${STRONG_GLOBAL:-8}
CONFIG=$ROOT/inputs/bench-gpt2-23m.ini
# For trying the scripts out quickly on another shape (not for results): meshtrain overrides
# and the matching perf/peer/torch_gpt.py arguments, e.g. MODEL_ARGS="--model.n_layers=2"
# PEER_ARGS="--n_layers 2".
MODEL_ARGS=${MODEL_ARGS:-}
PEER_ARGS=${PEER_ARGS:-}
RANKS=(${SWEEP_RANKS:-1 2 4})  # ascending
CEILING_SHAPES=${CEILING_SHAPES:-1024,2048}  # bench gemm --sizes, --seconds
CEILING_SECONDS=${CEILING_SECONDS:-0.7}
COMM_MAX=${COMM_MAX:-64MiB}        # bench comm's largest message, world groups
COMM_TP_MAX=${COMM_TP_MAX:-16MiB}  # and tp groups
STRATEGIES=(full_shard shard_grad_op no_shard)
rm -rf "$OUT/runs" "$OUT/plans" "$OUT/peer" "$OUT/comm" "$OUT/ceilings"
mkdir -p "$OUT/runs" "$OUT/plans" "$OUT/peer" "$OUT/comm" "$OUT/ceilings"
cd "$ROOT"
T0=$(date +%s)
WAITED=0  # seconds spent waiting for other users' jobs between runs (not part of the sweep's time)
elapsed() { echo $(( $(date +%s) - T0 ))s; }

wait_quiet || true
machine_json "$OUT/machine.json"
echo "== sweep: load $(cut -d' ' -f1-3 /proc/loadavg), $THREADS thread(s) per rank, $BLAS_ENV_USED; OpenBLAS $(openblas_core | cut -d'|' -f1)"
echo "   strong scaling: global batch $STRONG_GLOBAL sequences; weak scaling: $MICRO sequences per data-parallel rank"

# ---- ceilings ------------------------------------------------------------------------------
wait_idle || true
for n in "${RANKS[@]}"; do
  mpirun_n "$n" "$MESHTRAIN" bench gemm --sizes "$CEILING_SHAPES" --seconds "$CEILING_SECONDS" \
    --json "$OUT/ceilings/gemm-$n.json" | tail -2
  mpirun_n "$n" "$MESHTRAIN" bench memory --sizes 64MiB --seconds 0.5 --json "$OUT/ceilings/memory-$n.json" | tail -1
done
echo "   ceilings done ($(elapsed))"

# ---- communication benchmark -------------------------------------------------------------
wait_idle || true
# World groups at every rank count of the sweep above 1 (default 2 and 4), the tp groups of a
# tp=2 mesh at the largest (default 4 ranks: two groups of 2).
for n in "${RANKS[@]}"; do
  (( n > 1 )) || continue
  mpirun_n "$n" "$MESHTRAIN" bench comm --min_bytes 1KiB --max_bytes "$COMM_MAX" --warmup 3 --iters 10 \
    --csv "$OUT/comm/world-$n.csv" --json "$OUT/comm/world-$n.json" > "$OUT/comm/world-$n.txt"
  grep -E '^# (all_gather|memory)' "$OUT/comm/world-$n.txt" | sed "s/^/   world-$n /" || true
done
n_max=${RANKS[-1]}
if (( n_max > 1 )); then
  mpirun_n "$n_max" "$MESHTRAIN" bench comm --parallel.tp=2 --group tp --ops all_reduce --min_bytes 1KiB \
    --max_bytes "$COMM_TP_MAX" --warmup 3 --iters 10 --csv "$OUT/comm/tp-$n_max.csv" --json "$OUT/comm/tp-$n_max.json" \
    > "$OUT/comm/tp-$n_max.txt"
  grep -h 'wrong results' "$OUT"/comm/*.txt
fi
echo "   comm benchmark done ($(elapsed))"

# ---- meshtrain runs ------------------------------------------------------------------------
mode_args() {  # MODE -> batch arguments
  if [[ $1 == strong ]]; then echo "--train.micro_batch=$MICRO --train.global_batch=$STRONG_GLOBAL"
  else echo "--train.micro_batch=$MICRO --train.grad_accum=1"; fi
}
for mode in strong weak; do
  for n in "${RANKS[@]}"; do
    for tp in 1 2; do
      (( tp <= n )) || continue
      dp=$(( n / tp ))
      args="$(mode_args $mode) --parallel.tp=$tp"
      # plan measures its inputs (GEMM rates, kernel rates, bus bandwidth) with every rank at
      # once: like a run, it must not start while the previous run's ranks are still exiting.
      tw=$(date +%s); wait_idle || true; WAITED=$(( WAITED + $(date +%s) - tw ))
      mpirun_n "$n" "$MESHTRAIN" plan "$CONFIG" $MODEL_ARGS $args > "$OUT/plans/$mode-${n}r-tp$tp.txt" 2>&1 ||
        { tail "$OUT/plans/$mode-${n}r-tp$tp.txt"; exit 1; }
      strategies=("${STRATEGIES[@]}")
      (( dp == 1 )) && strategies=(no_shard)
      for s in "${strategies[@]}"; do
        name=$mode-${n}r-tp$tp-$s
        dir=$OUT/runs/$name
        tw=$(date +%s); wait_idle || true; WAITED=$(( WAITED + $(date +%s) - tw ))
        load=$(load1); others=$(others_running)
        mpirun_n "$n" "$MESHTRAIN" train "$CONFIG" $MODEL_ARGS $args --parallel.strategy=$s --train.steps=$STEPS \
          --train.log_every=1 --checkpoint.save_final=false --output.dir="$dir" > "$OUT/runs/$name.log" 2>&1 ||
          { tail -20 "$OUT/runs/$name.log"; exit 1; }
        echo "{\"mode\": \"$mode\", \"ranks\": $n, \"tp\": $tp, \"dp\": $dp, \"strategy\": \"$s\", \"micro_batch\": $MICRO, \"load1_before\": $load, \"others_running_before\": $others, \"load1_after\": $(load1)}" > "$dir/sweep.json"
        printf '   %-34s %s\n' "$name" "$(tail -1 "$dir/metrics.jsonl" | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print("%.0f tok/s, step %.2f s, exposed comm %.3f s" % (r["tokens_per_s"], r["step_time_s"], r["exposed_comm_s_max"]))') ($(elapsed))"
      done
    done
  done
done

# ---- PyTorch peer --------------------------------------------------------------------------
for mode in strong weak; do
  for n in "${RANKS[@]}"; do
    accum=1
    [[ $mode == strong ]] && accum=$(( STRONG_GLOBAL / (MICRO * n) ))
    name=$mode-${n}r
    tw=$(date +%s); wait_idle || true; WAITED=$(( WAITED + $(date +%s) - tw ))
    mpirun_n "$n" "$PY" "$PERF_DIR/peer/torch_gpt.py" --steps $STEPS --warmup $WARMUP --threads $THREADS \
      --micro_batch $MICRO --grad_accum $accum --json "$OUT/peer/$name.json" $PEER_ARGS > "$OUT/peer/$name.log" 2>&1 ||
      { tail -20 "$OUT/peer/$name.log"; exit 1; }
    printf '   pytorch %-26s %.0f tok/s (%s)\n' "$name" "$("$PY" -c "import json; print(json.load(open('$OUT/peer/$name.json'))['tokens_per_s'])")" "$(elapsed)"
  done
done

echo "{\"wall_s\": $(( $(date +%s) - T0 - WAITED )), \"idle_wait_s\": $WAITED, \"load1_end\": $(load1), \"steps\": $STEPS, \"warmup\": $WARMUP, \"micro_batch\": $MICRO, \"strong_global_batch\": $STRONG_GLOBAL}" > "$OUT/sweep_meta.json"
"$PY" "$PERF_DIR/collect.py" "$OUT"
"$PY" "$PERF_DIR/plot.py" "$OUT"
echo "== sweep done in $(elapsed)"
