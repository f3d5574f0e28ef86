#!/usr/bin/env bash
# perf/profile.sh [OUT_DIR]: where the time of one training step goes, for meshtrain and for the
# PyTorch peer, on inputs/bench-gpt2-23m.ini at 1 rank x THREADS thread(s), fp32. Samples CPU time
# with `perf record` (cpu-clock, FREQ Hz) over STEPS steps of each and groups the symbols into
# kernel categories (perf/profile_breakdown.py): CPU seconds per step per category. Sampling
# counts CPU time, not wall time, so the shares survive a busy machine better than timings do.
# Environment: MESHTRAIN, THREADS (1), STEPS (8), FREQ (999), PERF_MAX_LOAD; for trying the
# script out (tests/perf/profile_dry_run.sh), not for results: MODEL_ARGS (meshtrain overrides)
# and PEER_ARGS (the matching perf/peer/torch_gpt.py arguments), as perf/bench_step.sh.
# OUT_DIR is replaced only by a run that finished (perf/common.sh stage_results).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
FINAL_OUT=$(realpath -m "${1:-$ROOT/perf/results/profile}")  # absolute: the runs start in $ROOT
STEPS=${STEPS:-8}
FREQ=${FREQ:-999}
read -r -a MODEL_ARGS <<<"${MODEL_ARGS:-}"
read -r -a PEER_ARGS <<<"${PEER_ARGS:-}"
command -v perf >/dev/null || { echo "perf/profile.sh: needs linux-perf (apt-get install linux-perf)" >&2; exit 2; }
OUT=$(stage_results "$FINAL_OUT")
cd "$ROOT"
wait_quiet || true
echo "== profile: load $(load1), $THREADS thread(s), $BLAS_ENV_USED"
perf record -q -F "$FREQ" -o "$OUT/meshtrain.perf.data" -- "$MESHTRAIN" train inputs/bench-gpt2-23m.ini \
  "${MODEL_ARGS[@]}" --train.steps="$STEPS" --parallel.strategy=no_shard --output.dir="$OUT/mt-run" --checkpoint.save_final=false \
  > "$OUT/meshtrain.log" 2>&1
perf record -q -F "$FREQ" -o "$OUT/pytorch.perf.data" -- "$PY" "$PERF_DIR/peer/torch_gpt.py" --steps "$STEPS" \
  --warmup 1 --threads "$THREADS" "${PEER_ARGS[@]}" --json "$OUT/pytorch-run.json" > "$OUT/pytorch.log" 2>&1
{
  "$PY" "$PERF_DIR/profile_breakdown.py" meshtrain "$OUT/meshtrain.perf.data" "$FREQ" "$STEPS" --json "$OUT/meshtrain.json"
  echo
  "$PY" "$PERF_DIR/profile_breakdown.py" pytorch "$OUT/pytorch.perf.data" "$FREQ" "$STEPS" --json "$OUT/pytorch.json"
} | tee "$OUT/breakdown.txt"
echo "{\"load1_end\": $(load1), \"steps\": $STEPS, \"freq\": $FREQ}" > "$OUT/meta.json"
rm -f "$OUT"/*.perf.data.old
publish_results "$OUT" "$FINAL_OUT"
