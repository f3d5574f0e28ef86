#!/usr/bin/env bash
# perf/bench_norms.sh [OUT_DIR]: gpu.fused_norms on CPU, fused against unfused, side by side.
# Runs `bench_kernels --only=norms` (the LayerNorm/RMSNorm section of the kernel
# micro-benchmark: N 8192 rows, C 768, fp32, best of 5 per kernel) REPS times; in each run
# the fused and the unfused kernels are timed back to back in one process, so each run gives
# one fused/unfused ratio per pair and the spread of the ratios over the runs says how much
# of a difference the shared machine's noise can hide. With BASELINE_BENCH (a bench_kernels
# built before a change) both binaries run in each rep, alternating which goes first.
# Results: OUT_DIR/runs.csv and results.md (median ratio, min-max). Environment: BENCH
# (default build/cpu/bin/bench_kernels), BASELINE_BENCH, REPS (8), THREADS (1), PERF_MAX_LOAD,
# SECTION (norms; epilogues: gpu.epilogues' host passes instead, `bench_kernels
# --only=epilogues`: bias + GELU and GELU backward + bias gradient on (8192, 3072), fused
# against add_bias + gelu_forward and gelu_backward + bias_backward; default OUT_DIR then
# perf/results/bench_epilogues), BENCH_CPU_TIME (1: bench_kernels times by the process's CPU
# time, steadier on a loaded machine; recorded in results.md).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SECTION=${SECTION:-norms}
[[ $SECTION == norms || $SECTION == epilogues ]] || { echo "perf/bench_norms.sh: SECTION is norms or epilogues" >&2; exit 2; }
OUT=${1:-$ROOT/perf/results/bench_$SECTION}
BENCH=${BENCH:-$ROOT/build/cpu/bin/bench_kernels}
REPS=${REPS:-8}
[[ -x $BENCH ]] || { echo "perf/bench_norms.sh: $BENCH not found (cmake --build build/cpu --target bench_kernels)" >&2; exit 2; }
[[ -z ${BASELINE_BENCH:-} || -x $BASELINE_BENCH ]] || { echo "perf/bench_norms.sh: BASELINE_BENCH $BASELINE_BENCH is not executable" >&2; exit 2; }
# Into a staging directory: OUT_DIR is replaced only when the run finished (perf/common.sh).
FINAL_OUT=$OUT
OUT=$(stage_results "$FINAL_OUT") && mkdir -p "$OUT/runs"
echo "binary,rep,kernel,ms,load1" >"$OUT/runs.csv"
for ((rep = 1; rep <= REPS; rep++)); do
  order=(candidate)
  if [[ -n ${BASELINE_BENCH:-} ]]; then
    order=(baseline candidate)
    ((rep % 2 == 0)) && order=(candidate baseline)
  fi
  for which in "${order[@]}"; do
    bin=$BENCH
    [[ $which == baseline ]] && bin=$BASELINE_BENCH
    wait_quiet || true
    l=$(load1)
    log="$OUT/runs/$which-r$rep.txt"
    "$bin" --only="$SECTION" >"$log" 2>&1 || { echo "perf/bench_norms.sh: $bin failed, see $log" >&2; exit 1; }
    # "name   12.345 ms   6.78 GB/s": the name is everything before the time.
    awk -v w="$which" -v r="$rep" -v l="$l" '/ ms /{n=$0; sub(/ +[0-9.]+ ms .*/, "", n); gsub(/,/, ";", n); for (i = 1; i <= NF; ++i) if ($(i+1) == "ms") t = $i; printf "%s,%d,%s,%s,%s\n", w, r, n, t, l}' "$log" >>"$OUT/runs.csv"
  done
done
"$PY" - "$OUT" "$SECTION" <<'PY'
import csv, os, statistics, sys
out, section = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(out + "/runs.csv")))
t = {}
for r in rows:
    t.setdefault((r["binary"], int(r["rep"])), {})[r["kernel"]] = float(r["ms"])
pairs = [("LayerNorm backward", "fused residual_layernorm_backward", "unfused layernorm+bias backward"),
         ("LayerNorm forward", "fused residual_layernorm_forward", "unfused residual+layernorm fwd"),
         ("RMSNorm backward", "fused residual_rmsnorm_backward", "unfused rmsnorm backward"),
         ("RMSNorm forward", "fused residual_rmsnorm_forward", "unfused residual+rmsnorm fwd")]
title = "gpu.fused_norms on CPU: fused / unfused time (bench_kernels --only=norms, N 8192, C 768, fp32)"
if section == "epilogues":
    # Each includes rewriting the GEMM's output first (the same copy in both forms).
    pairs = [("bias + GELU forward", "fused bias_gelu_forward", "unfused add_bias + gelu_forward"),
             ("GELU backward + bias gradient", "fused gelu_backward_bias_grad", "unfused gelu_backward + bias_backward")]
    title = ("gpu.epilogues on CPU: the pass after the GEMM, fused / unfused time (bench_kernels --only=epilogues, "
             "N 8192, 4C 3072, fp32, each including the same copy of the GEMM output)")
if os.environ.get("BENCH_CPU_TIME") == "1":
    title += "; times are the process's CPU time (BENCH_CPU_TIME=1)"
binaries = sorted({b for b, _ in t}, key=lambda b: b != "baseline")
L = ["# " + title, "",
     "| binary | pair | fused ms (median) | unfused ms (median) | ratio median | ratio min-max | reps |",
     "|---|---|---|---|---|---|---|"]
for b in binaries:
    reps = sorted(r for bb, r in t if bb == b)
    for name, f, u in pairs:
        fs = [t[(b, r)][f] for r in reps]
        us = [t[(b, r)][u] for r in reps]
        q = [x / y for x, y in zip(fs, us)]
        L.append("| %s | %s | %.3f | %.3f | %.3f | %.3f-%.3f | %d |" % (b, name, statistics.median(fs), statistics.median(us),
                                                                     statistics.median(q), min(q), max(q), len(q)))
open(out + "/results.md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
publish_results "$OUT" "$FINAL_OUT"
