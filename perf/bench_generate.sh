#!/usr/bin/env bash
# perf/bench_generate.sh [OUT_DIR]: generation speed with and without the KV cache (issue 18
# "must show" 6) at 512 tokens of context, on two small models (23 M-parameter GPT-2 and a
# Llama of the same width with grouped-query attention), 1 rank x THREADS thread(s), fp32.
#
# Each model gets a checkpoint from one training step on random tokens, then generates
# greedily (temperature 0) TOKENS tokens after a 512-byte prompt (the byte tokenizer: 512
# tokens) with the cache and with --no_kv_cache. `meshtrain generate` reports the first
# token's time (the prompt's forward) and the mean time of every later token on stderr;
# the ratio of the later-token times is the speedup. The two texts must be identical
# (greedy decoding), else the script fails. Works in a scratch directory (the checkpoints
# are ~0.5 GB, removed at exit) and writes OUT_DIR (default perf/results/bench_generate):
# machine.json, results.json, results.md and the generate logs.
#
# Environment: MESHTRAIN (binary), THREADS (1), TOKENS (32), REPS (2), PERF_MAX_LOAD.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# Absolute paths: the runs happen in a scratch directory (a relative OUT_DIR or MESHTRAIN
# would name a place inside it).
OUT=$(realpath -m "${1:-$ROOT/perf/results/bench_generate}")
MESHTRAIN=$(realpath "$MESHTRAIN")
TOKENS=${TOKENS:-32}
REPS=${REPS:-2}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

wait_quiet || true
machine_json machine.json
echo "== bench_generate: load $(load1), $THREADS thread(s), $TOKENS tokens after a 512-token prompt"
head -c 512 /usr/share/common-licenses/GPL-3 > prompt.txt
[[ $(wc -c < prompt.txt) == 512 ]] || { echo "bench_generate: need a 512-byte prompt from /usr/share/common-licenses/GPL-3" >&2; exit 2; }

# Models: (name, overrides). max_seq_len 1024 so the whole context stays in the window.
declare -A MODEL
MODEL[gpt2]="--model.family=gpt2 --model.vocab_size=8192 --model.d_model=512 --model.n_layers=6 --model.n_heads=8 --model.max_seq_len=1024 --model.tie_embeddings=true"
MODEL[llama]="--model.family=llama --model.vocab_size=8192 --model.d_model=512 --model.n_layers=6 --model.n_heads=8 --model.n_kv_heads=2 --model.ffn_dim=1376 --model.max_seq_len=1024 --model.tie_embeddings=false"

for m in gpt2 llama; do
  # shellcheck disable=SC2086
  mpirun_n 1 "$MESHTRAIN" train ${MODEL[$m]} --data.dir=random --train.steps=1 --train.micro_batch=1 \
    --train.seq_len=64 --train.eval_every=0 --train.sample_tokens=0 --output.dir="run-$m" > "train-$m.log" 2>&1 ||
    { tail -20 "train-$m.log"; exit 1; }
  for rep in $(seq 1 "$REPS"); do
    for mode in cache nocache; do
      flag=(); [[ $mode == nocache ]] && flag=(--no_kv_cache)
      wait_idle || true
      mpirun_n 1 "$MESHTRAIN" generate "run-$m/config.ini" --prompt "$(cat prompt.txt)" --tokens "$TOKENS" \
        --temperature 0 "${flag[@]}" > "gen-$m-$mode-$rep.out" 2> "gen-$m-$mode-$rep.err" ||
        { cat "gen-$m-$mode-$rep.err"; exit 1; }
      grep 'ms/token' "gen-$m-$mode-$rep.err" | sed "s/^/   $m $mode: /"
    done
    cmp -s "gen-$m-cache-$rep.out" "gen-$m-nocache-$rep.out" ||
      { echo "bench_generate: $m: greedy text differs with and without the KV cache" >&2; exit 1; }
  done
done

"$PY" - "$TOKENS" "$REPS" <<'PYEOF'
import json, re, statistics, sys
tokens, reps = int(sys.argv[1]), int(sys.argv[2])
pat = re.compile(r"(\d+)-token context, first token ([\d.]+) s, then ([\d.]+) ms/token over (\d+) tokens")
res = {"tokens": tokens, "reps": reps, "models": {}}
for m in ("gpt2", "llama"):
    r = {}
    for mode in ("cache", "nocache"):
        runs = [pat.search(open(f"gen-{m}-{mode}-{i}.err").read()) for i in range(1, reps + 1)]
        r[mode] = {"context": int(runs[0][1]),
                   "first_token_s": statistics.median(float(x[2]) for x in runs),
                   "ms_per_token": statistics.median(float(x[3]) for x in runs)}
    r["speedup_per_token"] = r["nocache"]["ms_per_token"] / r["cache"]["ms_per_token"]
    res["models"][m] = r
json.dump(res, open("results.json", "w"), indent=1)
with open("results.md", "w") as f:
    load = json.load(open("machine.json"))["load_at_start"]
    f.write(f"Greedy generation, {tokens} tokens after a 512-token prompt, 1 rank, fp32 (median of {reps}; "
            f"load average {load} at start: with and without the cache alternate, so both see the same load).\n\n")
    f.write("| model | ms/token without cache | ms/token with KV cache | speedup | first token (prefill) with / without |\n|---|---|---|---|---|\n")
    for m, r in res["models"].items():
        f.write(f"| {m} | {r['nocache']['ms_per_token']:.1f} | {r['cache']['ms_per_token']:.2f} | "
                f"{r['speedup_per_token']:.1f}x | {r['cache']['first_token_s']:.3f} s / {r['nocache']['first_token_s']:.3f} s |\n")
print(open("results.md").read())
PYEOF
# OUT_DIR is replaced only now, after every run and check passed: a failed run leaves the
# previous results in place (and NOTE.md / SECTION.md always: perf/common.sh).
stage=$(stage_results "$OUT")
cp machine.json results.json results.md gen-*.err "$stage/"
publish_results "$stage" "$OUT"
