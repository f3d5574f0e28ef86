#!/usr/bin/env bash
# perf/bench_save.sh [OUT_DIR]: checkpoint save times of a 37 MiB checkpoint (tiny GPT-2 at
# d_model 256, 4 layers: 3.24 M parameters x weights + 2 AdamW moments, fp32) with
# `meshtrain bench io` (best of ITERS saves, plus the file-system and network ceilings),
# in about 2 minutes:
#
#   1host-shm    4 ranks on this machine, shared memory between them (btl vader,self)
#   1host-tcp    4 ranks on this machine, TCP between them (--mca btl tcp,self)
#   2hosts       2 namespace hosts x 2 ranks (tests/multihost/cluster.sh): TCP between hosts
#   4hosts       4 namespace hosts x 1 rank
#
# each with full_shard (every rank writes its shard) and hybrid_shard (dp_replicate=2:
# replica 0 writes). The namespace cases need root; without it they are left out and the
# table says so. Results: OUT_DIR/results.json and results.md (perf/report.py puts the
# table into perf/README.md). Environment: MESHTRAIN, ITERS (5), PERF_MAX_LOAD (1.5), CASES
# (the cases above to run, default all); for trying the script out
# (tests/perf/checkpoint_benches_dry_run.sh), not for results: MODEL_ARGS (default
# "--model.d_model=256 --model.n_layers=4"). OUT_DIR is replaced only by a run that finished
# with every case (perf/common.sh): a case that fails makes the run exit 1 and leaves the
# previous results, its own in OUT_DIR.partial.
# Nothing here asserts a time: the tests check correctness only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
FINAL_OUT=${1:-$ROOT/perf/results/bench_save}
ITERS=${ITERS:-5}
read -r -a MODEL_ARGS <<<"${MODEL_ARGS:---model.d_model=256 --model.n_layers=4}"
MODEL=("$ROOT/inputs/tiny-gpt2.ini" "${MODEL_ARGS[@]}" --data.dir=random)
CASES=" ${CASES:-1host-shm 1host-tcp 2hosts 4hosts} "
OUT=$(stage_results "$FINAL_OUT") && mkdir -p "$OUT/runs"
WORK=$(mktemp -d /tmp/meshtrain-bench-save.XXXXXX)

source "$ROOT/tests/multihost/cluster.sh"
have_cluster=0
if reason=$(cluster_check); then have_cluster=1; else echo "perf: $reason; only the one-host cases run" >&2; fi
trap 'cluster_down; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM  # (the EXIT trap then cleans up)

STRATS=("full_shard --parallel.dp_replicate=1 --parallel.dp_shard=-1"
        "hybrid_shard --parallel.dp_replicate=2 --parallel.dp_shard=-1")

# run_case NAME LAUNCH...: bench io for both strategies; LAUNCH is the launcher prefix. A
# strategy that fails is reported, the others still run, and the run ends with exit 1.
failed=0
run_case() {
  local name=$1 s strat
  shift
  for s in "${STRATS[@]}"; do
    read -r strat rest <<<"$s"
    read -r -a mesh <<<"$rest"
    wait_quiet || true
    local tag="$name-$strat" l0
    l0=$(load1)
    "$@" "$MESHTRAIN" bench io "${MODEL[@]}" --parallel.strategy="$strat" "${mesh[@]}" \
      --output.dir="$WORK/$tag" --iters "$ITERS" --json "$OUT/runs/$tag.json" >"$OUT/runs/$tag.log" 2>&1 ||
      { cat "$OUT/runs/$tag.log" >&2; echo "perf: $tag failed" >&2; failed=1; continue; }
    echo "{\"case\": \"$name\", \"strategy\": \"$strat\", \"load_before\": $l0, \"load_after\": $(load1)}" \
      >"$OUT/runs/$tag.case.json"
    grep -E "^ (save|file_system|network)|^bound" "$OUT/runs/$tag.log" | sed "s/^/$tag: /"
  done
}

wanted() { [[ $CASES == *" $1 "* ]]; }
wanted 1host-shm && run_case 1host-shm mpirun_n 4 --mca btl vader,self
wanted 1host-tcp && run_case 1host-tcp mpirun_n 4 --mca btl tcp,self
if ((have_cluster)); then
  export OMP_NUM_THREADS OPENBLAS_NUM_THREADS OMP_PROC_BIND
  if wanted 2hosts; then
    CLUSTER_NO_TRAP=1 cluster_up 2 >/dev/null
    run_case 2hosts cluster_mpirun 2 --
    cluster_down
  fi
  if wanted 4hosts; then
    CLUSTER_NO_TRAP=1 cluster_up 4 >/dev/null
    run_case 4hosts cluster_mpirun 1 --
    cluster_down
  fi
fi

"$PY" - "$OUT" "$ITERS" "$have_cluster" <<'EOF'
import glob, json, os, sys, time
out, iters, have_cluster = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
rows = []
what = {"1host-shm": ("1 x 4", "shared memory"), "1host-tcp": ("1 x 4", "TCP (btl tcp,self)"),
        "2hosts": ("2 x 2", "TCP between namespace hosts"), "4hosts": ("4 x 1", "TCP between namespace hosts")}
for path in sorted(glob.glob(os.path.join(out, "runs", "*.json"))):
    if path.endswith(".case.json"):
        continue
    r = json.load(open(path))
    r.update(json.load(open(path[:-5] + ".case.json")))
    rows.append(r)
order = list(what)
rows.sort(key=lambda r: (order.index(r["case"]) if r["case"] in order else 99, r["strategy"]))
json.dump({"measured": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "iters": iters, "runs": rows},
          open(os.path.join(out, "results.json"), "w"), indent=1)
lines = [f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `perf/bench_save.sh` "
         f"(`meshtrain bench io`, best of {iters} saves; 1-minute load average before/after each case).\n",
         "| case | hosts x ranks | transport | strategy | save (s) | GB/s | data phase (s) | file system ceiling (GB/s) "
         "| network ceiling (GB/s) | bound | load |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    hx, tr = what.get(r["case"], ("?", "?"))
    data = min(s["data_seconds"] for s in r["saves"])
    net = f"{r['network_gbps']:.3f}" if "network_gbps" in r else "- (one node)"
    lines.append(f"| {r['case']} | {hx} | {tr} | {r['strategy']} | {r['save_seconds']:.3f} | {r['save_gbps']:.3f} | "
                 f"{data:.3f} | {r['file_system_gbps']:.3f} | {net} | {r['bound'].replace('_', ' ')} | "
                 f"{r['load_before']:.1f}/{r['load_after']:.1f} |")
if not have_cluster:
    lines.append("\nThe namespace-host cases were not run (they need root).")
open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
if ((failed)); then
  echo "perf: a case failed (above); the previous results are kept, this run's are in $OUT" >&2
  exit 1
fi
publish_results "$OUT" "$FINAL_OUT"
