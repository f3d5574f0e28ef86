#!/usr/bin/env bash
# perf/bench_step.sh [OUT_DIR]: meshtrain vs PyTorch on inputs/bench-gpt2-23m.ini, in ONE run
# with the ceilings it is divided by (issue 3 "must show" 5, issue 4 "must show" 4):
#
#   ceilings   SGEMM peak (square and the model's own GEMM shapes) and copy bandwidth, at 1 and
#              2 ranks running at once
#   1 rank x THREADS thread(s), fp32   meshtrain (no_shard)  vs  PyTorch (perf/peer/torch_gpt.py)
#   2 ranks x THREADS thread(s), fp32  meshtrain full_shard and no_shard  vs  PyTorch DDP (gloo)
#
# Every configuration runs REPS times, interleaved (so drift of the machine hits all alike);
# each run takes the median step time after WARMUP steps, each configuration the median over
# its runs. Writes OUT_DIR (default perf/results/bench_step): raw runs, ceilings, results.json
# and results.md with the ratios meshtrain/PyTorch and full_shard/no_shard.
#
# Environment: MESHTRAIN (binary), THREADS (1), STEPS (12), WARMUP (3), REPS (2),
# PERF_NATIVE_BLAS (1: unset OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE for every command), PERF_MAX_LOAD,
# PERF_IDLE_MAX; for trying the script out (tests/perf/bench_step_dry_run.sh), not for results:
# MODEL_ARGS and PEER_ARGS (below), CEILING_SHAPES and CEILING_SECONDS (`bench gemm --sizes`,
# `--seconds`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=${1:-$ROOT/perf/results/bench_step}
STEPS=${STEPS:-12}
WARMUP=${WARMUP:-3}
REPS=${REPS:-2}
CONFIG=$ROOT/inputs/bench-gpt2-23m.ini
# For trying the scripts out quickly on another shape (not for results): meshtrain overrides
# and the matching perf/peer/torch_gpt.py arguments, e.g. MODEL_ARGS="--model.n_layers=2"
# PEER_ARGS="--n_layers 2".
MODEL_ARGS=${MODEL_ARGS:-}
PEER_ARGS=${PEER_ARGS:-}
mkdir -p "$OUT"
rm -rf "$OUT/runs" && mkdir -p "$OUT/runs" "$OUT/ceilings"
cd "$ROOT"

wait_quiet || true
machine_json "$OUT/machine.json"
echo "== bench_step: $(cat /proc/loadavg | cut -d' ' -f1-3) load, $THREADS thread(s) per rank, $BLAS_ENV_USED (machine: $BLAS_ENV_ORIGINAL)"
echo "   OpenBLAS kernel: $(openblas_core)"

# Back of the envelope first: FLOPs of one step over the peak measured below.
"$PY" - <<'EOF'
V, C, L, T, B = 8192, 512, 6, 256, 4
F = 4 * C
fwd = 2.0 * (L * (4 * C * C + 2 * C * F) + V * C) + 4.0 * L * T * C
print(f"   model: {L} layers, d_model {C}, vocab {V}, seq {T}, micro-batch {B}: {3*fwd/1e6:.1f} MFLOP per token "
      f"(fwd+bwd), {3*fwd*B*T/1e9:.1f} GFLOP per rank-step")
EOF

# ---- ceilings ------------------------------------------------------------------------------
wait_idle || true
# The square sizes give the peak; the others are the model's own GEMM shapes (m x n x k).
SHAPES=${CEILING_SHAPES:-2048,1024,1024x1536x512,1024x512x512,1024x2048x512,1024x512x2048,1024x8192x512}
SECONDS_EACH=${CEILING_SECONDS:-1}
for n in 1 2; do
  mpirun_n $n "$MESHTRAIN" bench gemm --sizes "$SHAPES" --seconds "$SECONDS_EACH" --json "$OUT/ceilings/gemm-$n.json"
  mpirun_n $n "$MESHTRAIN" bench memory --sizes 64MiB --seconds "$(awk -v s="$SECONDS_EACH" 'BEGIN{print s/2}')" \
    --json "$OUT/ceilings/memory-$n.json"
done

# ---- runs ----------------------------------------------------------------------------------
run_meshtrain() {  # NAME RANKS STRATEGY
  local dir=$OUT/runs/$1
  rm -rf "$dir"
  wait_idle || true
  local others; others=$(others_running)
  echo "   load $(load1): meshtrain $2 rank(s) $3 -> $dir"
  mpirun_n "$2" "$MESHTRAIN" train "$CONFIG" $MODEL_ARGS --train.steps=$STEPS --parallel.strategy="$3" \
    --output.dir="$dir" --checkpoint.save_final=false --train.log_every=1 > "$dir.log" 2>&1 ||
    { tail -20 "$dir.log"; return 1; }
  echo "{\"load1\": $(load1), \"others_running_before\": $others}" > "$dir/load.json"
}
run_torch() {  # NAME RANKS
  local dir=$OUT/runs/$1
  mkdir -p "$dir"
  wait_idle || true
  local others; others=$(others_running)
  echo "   load $(load1): pytorch $2 rank(s) -> $dir"
  mpirun_n "$2" "$PY" "$PERF_DIR/peer/torch_gpt.py" --steps $STEPS --warmup $WARMUP --threads $THREADS \
    --micro_batch 4 --seq_len 256 --json "$dir/result.json" $PEER_ARGS > "$dir.log" 2>&1 || { tail -20 "$dir.log"; return 1; }
  echo "{\"load1\": $(load1), \"others_running_before\": $others}" > "$dir/load.json"
}
for rep in $(seq 1 "$REPS"); do
  run_meshtrain mt-1r-no_shard-$rep 1 no_shard
  run_torch pt-1r-$rep 1
  run_meshtrain mt-2r-full_shard-$rep 2 full_shard
  run_meshtrain mt-2r-no_shard-$rep 2 no_shard
  run_torch pt-2r-ddp-$rep 2
done

"$PY" "$PERF_DIR/summarize_step.py" "$OUT" --warmup "$WARMUP" --threads "$THREADS"
