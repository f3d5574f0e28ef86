#!/usr/bin/env bash
# perf/bench_async_checkpoint.sh [OUT_DIR]: what checkpoints every few steps cost training,
# synchronous vs asynchronous (checkpoint.async, issue 31), on the 23M benchmark model
# (inputs/bench-gpt2-23m.ini) at 2 ranks x $THREADS thread(s), in ONE run, interleaved:
#
#   none    no checkpoint (checkpoint.every=0, no final save)
#   sync    checkpoint.every=$EVERY, synchronous saves
#   async   checkpoint.every=$EVERY, checkpoint.async=true
#
# $REPS repetitions of the three, the order rotated each repetition (a slow minute of the
# shared machine hits each variant alike). Each run trains $STEPS steps (default 22: saves at
# steps 5, 10, 15, 20 -- 4 saves of the whole state, ~280 MB -- none of them the last step, so the last
# asynchronous save overlaps steps 21-22 as any other would); the figure is summary.json's
# loop_tokens_per_s: tokens over the training loop's wall time, saves included (the per-step
# tok/s of metrics.jsonl leave a save's time out). Ratios sync/none and async/none are per
# repetition; results.md gives their median, min and max. The async run's checkpoints are
# compared bit for bit with the sync run's of the same repetition
# (tests/checkpoint/same_checkpoint.py), so the speed is that of a complete, equal save.
# Environment: MESHTRAIN, THREADS (1), REPS (3), STEPS (22), EVERY (5), PERF_MAX_LOAD,
# PERF_IDLE_MAX; for trying the script out (tests/perf/checkpoint_benches_dry_run.sh), not for
# results: CONFIG (the .ini, default inputs/bench-gpt2-23m.ini) and MODEL_ARGS (overrides).
# OUT_DIR is replaced only by a run that finished (perf/common.sh stage_results): a failed run
# or a checkpoint that differs leaves the previous results and its own in OUT_DIR.partial.
# Nothing here asserts a time: the tests check correctness only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
FINAL_OUT=${1:-$ROOT/perf/results/bench_async_checkpoint}
REPS=${REPS:-3}
STEPS=${STEPS:-22}
EVERY=${EVERY:-5}
CONFIG=${CONFIG:-$ROOT/inputs/bench-gpt2-23m.ini}
read -r -a MODEL_ARGS <<<"${MODEL_ARGS:-}"
SAME=$ROOT/tests/checkpoint/same_checkpoint.py
# A save at the last step is completed after the loop, outside metrics.jsonl: the async runs
# need a save with a step after it, and the table a save.
((STEPS > EVERY && EVERY > 0)) || { echo "perf: STEPS ($STEPS) must exceed EVERY ($EVERY) > 0" >&2; exit 2; }
OUT=$(stage_results "$FINAL_OUT") && mkdir -p "$OUT/runs"
WORK=$(mktemp -d /tmp/meshtrain-bench-async.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

declare -A ARGS=(
  [none]="--checkpoint.every=0 --checkpoint.save_final=false"
  [sync]="--checkpoint.every=$EVERY --checkpoint.save_final=false --checkpoint.keep=10"
  [async]="--checkpoint.every=$EVERY --checkpoint.save_final=false --checkpoint.keep=10 --checkpoint.async=true"
)
variants=(none sync async)
echo "== bench_async_checkpoint: $REPS reps x {none, sync, async}, $STEPS steps, every=$EVERY, 2 ranks x $THREADS thread(s), load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= REPS; r++)); do
  for ((i = 0; i < 3; i++)); do
    v=${variants[$(((i + r - 1) % 3))]}
    tag=$v-$r
    wait_idle || true
    l0=$(load1)
    read -r -a extra <<<"${ARGS[$v]}"
    mpirun_n 2 "$MESHTRAIN" train "$CONFIG" "${MODEL_ARGS[@]}" --train.steps="$STEPS" --parallel.strategy=full_shard \
      --parallel.dp_shard=2 --train.peak_tflops=0.1 --output.dir="$WORK/$tag" "${extra[@]}" \
      >"$OUT/runs/$tag.log" 2>&1 || { tail -n 20 "$OUT/runs/$tag.log" >&2; echo "perf: $tag failed" >&2; exit 1; }
    cp "$WORK/$tag/summary.json" "$OUT/runs/$tag.summary.json"
    cp "$WORK/$tag/metrics.jsonl" "$OUT/runs/$tag.metrics.jsonl"
    echo "{\"variant\": \"$v\", \"rep\": $r, \"load_before\": $l0, \"load_after\": $(load1)}" >"$OUT/runs/$tag.case.json"
    echo "$tag: $(jq -r '"\(.loop_tokens_per_s | floor) tok/s over the loop (\(.loop_s * 100 | round / 100) s)"' "$WORK/$tag/summary.json")"
  done
  # The speed is that of complete saves, bitwise those of a synchronous save.
  for f in "$WORK/sync-$r"/checkpoints/step_*.h5; do
    "$PY" "$SAME" "$f" "$WORK/async-$r/checkpoints/$(basename "$f")" >>"$OUT/runs/same-$r.txt" ||
      { cat "$OUT/runs/same-$r.txt" >&2; echo "perf: async-$r's $(basename "$f") differs from sync-$r's" >&2; exit 1; }
  done
  echo "rep $r: $(grep -c ' == ' "$OUT/runs/same-$r.txt") async checkpoints bitwise equal to the sync ones"
  rm -rf "$WORK"/*-"$r"
done

"$PY" - "$OUT" "$REPS" "$STEPS" "$EVERY" "$THREADS" "$(basename "$CONFIG") ${MODEL_ARGS[*]}" <<'EOF'
import glob, json, os, statistics, sys, time
out, reps, steps, every, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
model = sys.argv[6].strip()
model = "23M model" if model == "bench-gpt2-23m.ini" else model
runs = {}
for path in glob.glob(os.path.join(out, "runs", "*.summary.json")):
    tag = os.path.basename(path)[: -len(".summary.json")]
    r = json.load(open(os.path.join(out, "runs", tag + ".case.json")))
    r["loop_tokens_per_s"] = json.load(open(path))["loop_tokens_per_s"]
    saves = [json.loads(l) for l in open(os.path.join(out, "runs", tag + ".metrics.jsonl")) if "ckpt_save_s" in l]
    r["saves"] = len(saves)
    r["save_s"] = [s["ckpt_save_s"] for s in saves]
    r["held_s"] = [s.get("ckpt_save_held_s", s["ckpt_save_s"]) for s in saves]
    r["save_mb"] = [s["ckpt_save_s"] * s["ckpt_save_gbps"] * 1e3 for s in saves]
    runs[tag] = r
def stats(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}
ratio = {v: [runs[f"{v}-{i}"]["loop_tokens_per_s"] / runs[f"none-{i}"]["loop_tokens_per_s"] for i in range(1, reps + 1)]
         for v in ("sync", "async")}
tok = {v: stats([runs[f"{v}-{i}"]["loop_tokens_per_s"] for i in range(1, reps + 1)]) for v in ("none", "sync", "async")}
held = {v: stats([h for i in range(1, reps + 1) for h in runs[f"{v}-{i}"]["held_s"]]) for v in ("sync", "async")}
whole = {v: stats([h for i in range(1, reps + 1) for h in runs[f"{v}-{i}"]["save_s"]]) for v in ("sync", "async")}
res = {"measured": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "model": model, "reps": reps, "steps": steps,
       "every": every, "threads_per_rank": threads, "tokens_per_s": tok,
       "ratio_to_none": {v: stats(x) for v, x in ratio.items()}, "ratio_per_rep": ratio,
       "save_held_s": held, "save_s": whole, "runs": runs}
json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=1)
f = lambda s, d=3: f"{s['median']:.{d}f} ({s['min']:.{d}f}-{s['max']:.{d}f})"
lines = [f"Measured {res['measured']}: {model}, 2 ranks x {threads} thread(s), {steps} steps, checkpoint.every={every} "
         f"({runs['sync-1']['saves']} saves of {runs['sync-1']['save_mb'][0]:.0f} MB per run), {reps} repetitions interleaved; median (min-max).", "",
         "| variant | tokens/s over the loop | ratio to none | training held per save (s) | save start to commit (s) |",
         "|---|---|---|---|---|",
         f"| none | {f(tok['none'], 0)} | 1 | - | - |"]
for v in ("sync", "async"):
    lines.append(f"| {v} every={every} | {f(tok[v], 0)} | {f(stats(ratio[v]))} | {f(held[v], 2)} | {f(whole[v], 2)} |")
open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
publish_results "$OUT" "$FINAL_OUT"
