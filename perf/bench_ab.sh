#!/usr/bin/env bash
# perf/bench_ab.sh [OUT_DIR]: two meshtrain binaries side by side on inputs/bench-gpt2-23m.ini,
# 1 rank no_shard and 2 ranks full_shard, REPS runs each, alternating which binary goes first
# (so drift of the shared machine hits both alike). For "this change does not slow the step
# down": BASELINE (required) is the binary before the change, MESHTRAIN the one after. Each
# run's number is the median step time after WARMUP steps; the final losses must be equal.
# results.md also gives each rep's candidate/baseline ratio (the two ran back to back), whose
# spread over the reps says how large a change the machine's noise can hide.
# Results: OUT_DIR/runs.csv and results.md. Environment: BASELINE, MESHTRAIN, REPS (6),
# STEPS (8), WARMUP (3), THREADS (1), PERF_MAX_LOAD; CONFIGS ("1:no_shard 2:full_shard":
# ranks:strategy); BASELINE_ENV (VAR=value words exported for the baseline's runs only: a
# runtime setting against the same binary, e.g. BASELINE=$MESHTRAIN
# BASELINE_ENV=OMPI_MCA_coll_libnbc_iallreduce_algorithm=0 CONFIGS=2:no_shard); BASELINE_ARGS
# (config overrides for the baseline's runs only: a config switch against the same binary,
# e.g. BASELINE=$MESHTRAIN BASELINE_ARGS="--gpu.fused_loss=false --gpu.fused_norms=false");
# ARGS (config overrides for every run, e.g. ARGS=--train.precision=bf16);
# LOSS_RTOL (0: the final losses must be bitwise equal; a path that sums in another order
# agrees to rounding only, e.g. LOSS_RTOL=1e-5). runs.csv and results.md also give each run's
# per-rank memory peak from its summary.json (the pool's reserved peak, max over ranks, and
# rank 0's peak of bytes in use).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT=${1:-$ROOT/perf/results/bench_ab}
[[ -x ${BASELINE:-} ]] || { echo "perf/bench_ab.sh: set BASELINE to the binary to compare against" >&2; exit 2; }
REPS=${REPS:-6}
read -r -a CONFIGS <<<"${CONFIGS:-1:no_shard 2:full_shard}"
read -r -a BASELINE_ENV <<<"${BASELINE_ENV:-}"
read -r -a BASELINE_ARGS <<<"${BASELINE_ARGS:-}"
read -r -a ARGS <<<"${ARGS:-}"
export LOSS_RTOL=${LOSS_RTOL:-0}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
# Into a staging directory: OUT_DIR is replaced only when the run finished (perf/common.sh).
FINAL_OUT=$OUT
OUT=$(stage_results "$FINAL_OUT") && mkdir -p "$OUT/runs"
echo "binary,ranks,strategy,rep,median_step_s,final_loss,load1,peak_mem_bytes,peak_in_use_bytes" >"$OUT/runs.csv"
for ((rep = 1; rep <= REPS; rep++)); do
  order=(baseline candidate)
  ((rep % 2 == 0)) && order=(candidate baseline)
  for cfg in "${CONFIGS[@]}"; do
    IFS=: read -r n strat <<<"$cfg"
    for which in "${order[@]}"; do
      bin=$MESHTRAIN
      extra=()
      [[ $which == baseline ]] && bin=$BASELINE && extra=("${BASELINE_ARGS[@]}")
      run="$OUT/runs/$which-$n-$strat-r$rep"
      wait_quiet || true
      # a subshell: BASELINE_ENV reaches the baseline's ranks (mpirun passes OMPI_MCA_* and
      # the exported environment on) and nothing else
      ( if [[ $which == baseline ]] && ((${#BASELINE_ENV[@]})); then export "${BASELINE_ENV[@]}"; fi
      mpirun_n "$n" "$bin" train "$ROOT/inputs/bench-gpt2-23m.ini" --data.dir=random --train.steps="$STEPS" \
        --train.eval_every=0 --checkpoint.save_final=false --parallel.strategy="$strat" --parallel.dp_shard="$n" \
        --parallel.tp=1 --output.dir="$run" "${ARGS[@]}" "${extra[@]}" >"$run.log" 2>&1 ) || { tail "$run.log" >&2; exit 1; }
      echo "$("$PY" "$PERF_DIR/perfutil.py" run_row "$run/metrics.jsonl" "$WARMUP" "$which,$n,$strat,$rep" "$(load1)"),$(
        "$PY" "$PERF_DIR/perfutil.py" peak_cols "$run/summary.json")" >>"$OUT/runs.csv"
      tail -n1 "$OUT/runs.csv"
    done
  done
done
"$PY" - "$OUT/runs.csv" "$OUT/results.md" "${CONFIGS[@]}" <<'PY'
import csv, os, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
configs = [tuple(c.split(":")) for c in sys.argv[3:]]
out = ["| ranks | strategy | baseline step s (median; min-max) | candidate step s (median; min-max) | candidate / baseline | "
       "paired ratio per rep (median; min-max) | final losses equal" + (f" (rel. {os.environ['LOSS_RTOL']})" if float(os.environ["LOSS_RTOL"]) else "") +
       " | per-rank peak MiB, baseline -> candidate (pool reserved, max over ranks; rank 0 in use) |",
       "|---|---|---|---|---|---|---|---|"]
ok = True
for n, s in configs:
    b = [r for r in rows if r["binary"] == "baseline" and r["ranks"] == n and r["strategy"] == s]
    c = [r for r in rows if r["binary"] == "candidate" and r["ranks"] == n and r["strategy"] == s]
    bt = [float(r["median_step_s"]) for r in b]; ct = [float(r["median_step_s"]) for r in c]
    losses = [float(r["final_loss"]) for r in b + c]
    rtol = float(os.environ["LOSS_RTOL"])
    same = len({r["final_loss"] for r in b + c}) == 1 if rtol == 0 else max(losses) - min(losses) <= rtol * abs(min(losses))
    ok &= same
    # The two runs of one rep ran back to back (order alternating): their ratio cancels most
    # of the shared machine's drift, and its spread over the reps is the noise to beat.
    by_rep = {r["rep"]: float(r["median_step_s"]) for r in b}
    paired = [float(r["median_step_s"]) / by_rep[r["rep"]] for r in c if r["rep"] in by_rep]
    # The memory peaks are the same every rep (the pool's allocations are deterministic): the
    # median; "-" where the binary's summary.json lacks the field (perfutil.peak_cols).
    def mib(rs, k):
        v = [float(r[k]) for r in rs if r[k]]
        return f"{statistics.median(v) / 2**20:.1f}" if v else "-"
    out.append(f"| {n} | {s} | {statistics.median(bt):.3f} ({min(bt):.3f}-{max(bt):.3f}) | {statistics.median(ct):.3f} "
               f"({min(ct):.3f}-{max(ct):.3f}) | {statistics.median(ct) / statistics.median(bt):.3f} | "
               f"{statistics.median(paired):.3f} ({min(paired):.3f}-{max(paired):.3f}) | {'yes' if same else '**no**'} | "
               f"{mib(b, 'peak_mem_bytes')} -> {mib(c, 'peak_mem_bytes')}; {mib(b, 'peak_in_use_bytes')} -> "
               f"{mib(c, 'peak_in_use_bytes')} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
sys.exit(0 if ok else 1)
PY
publish_results "$OUT" "$FINAL_OUT"
