#!/usr/bin/env bash
# The preference demo (issue 32; doc/finetuning.md, "The preference demo"): DPO on
# SmolLM2-135M-Instruct for the fine-tuning demo's date task. Installs the dependencies and
# builds meshtrain as scripts/run-finetune-demo.sh does, then
#   1. generates the date prompts (scripts/finetune-demo-data.sh) and turns each into a
#      preference pair: chosen = the ISO 8601 answer ("2024-03-07"), rejected = the same date
#      in a plausible wrong format (03/07/2024, 07.03.2024 or 2024/03/07, in turn);
#   2. `meshtrain prepare --format preference`: SmolLM2's chat template, both responses after
#      the prompt, masks on the responses; the training pairs and 50 held-out pairs (dates
#      never trained on) as two datasets;
#   3. "before": the base model with zero LoRA adapters, as DPO starts (one step at lr 0),
#      evaluated on the held-out pairs with `meshtrain eval --train.objective=dpo`;
#   4. DPO with LoRA on 2 ranks, 30 steps of 4 pairs (inputs/finetune-demo.ini, train.objective=dpo: the
#      reference is the base with the adapters off);
#   5. "after": the same evaluation of the trained adapters.
# Prints the held-out pairs' DPO accuracy, mean margin and rewards before and after, and the
# time per part. Everything lands in runs/preference-demo (PREF_DEMO_DIR).
# PREF_DEMO_OBJECTIVE=simpo runs the same steps with SimPO instead (train.objective=simpo, its
# default beta 2 and gamma 1: no reference; "before" is then the base's own length-normalized
# preference, not 0).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${MESHTRAIN_BUILD_DIR:-build/cpu}
work=${PREF_DEMO_DIR:-runs/preference-demo}
objective=${PREF_DEMO_OBJECTIVE:-dpo}
case $objective in
  dpo) objective_keys=(--train.objective=dpo --train.dpo_beta=0.1); objective_text="DPO (beta 0.1)" ;;
  simpo) objective_keys=(--train.objective=simpo); objective_text="SimPO (beta 2, gamma 1)" ;;
  *) echo "preference-demo.sh: PREF_DEMO_OBJECTIVE must be dpo or simpo, not '$objective'" >&2; exit 2 ;;
esac
n_train=240   # the pool the 30 steps of 4 pairs (120 draws) sample from
n_heldout=50

# shellcheck source=demo-setup.sh
source scripts/demo-setup.sh
rm -rf "$work" && mkdir -p "$work"

echo "== 1. pairs: the ISO answer (chosen) against a plausible wrong format (rejected)"
bash scripts/finetune-demo-data.sh "$work/data" "$n_train" "$n_heldout"
# pairs FIELD: a record's prompt and its ISO date -> {"prompt","chosen","rejected"}; the
# wrong format cycles through US, German and slashed-ISO forms by the record's index.
pairs() {
  jq -c -s --arg p "$1" --arg a "$2" 'to_entries[] | .key as $i | .value | (.[$a] | split("-")) as $d |
    {prompt: .[$p], chosen: .[$a],
     rejected: ([$d[1] + "/" + $d[2] + "/" + $d[0], $d[2] + "." + $d[1] + "." + $d[0], $d[0] + "/" + $d[1] + "/" + $d[2]][$i % 3])}'
}
pairs instruction output <"$work/data/train.jsonl" >"$work/data/train_pairs.jsonl"
pairs prompt answer <"$work/data/heldout.jsonl" >"$work/data/heldout_pairs.jsonl"
head -n 2 "$work/data/train_pairs.jsonl"
echo "== 2. prepare --format preference (SmolLM2's ChatML, rows of 81 tokens)"
for split in train heldout; do
  "$bin" prepare --format preference --input "$work/data/${split}_pairs.jsonl" --output "$work/$split" \
    --tokenizer "$gguf" --seq_len 80 --val_fraction 0
done
phase_done "data + prepare"

dpo=(train inputs/finetune-demo.ini --checkpoint.init_from="$gguf" --data.dir="$work/train" "${objective_keys[@]}"
  --train.global_batch=8)
# heldout NAME RUN: DPO's metrics of RUN's final checkpoint over every held-out pair.
heldout() {
  "$bin" eval "$2/config.ini" --data.dir="$work/heldout" --split train --batches 0 --json | tee "$work/$1.log"
  grep '^{' "$work/$1.log" | tail -n 1 >"$work/$1.json"
}
echo "== 3. before: the base model with zero adapters (one step at lr 0), on $n_heldout held-out pairs"
mpirun -np 2 "${mpirun_flags[@]}" "$bin" "${dpo[@]}" --train.steps=1 --train.lr=0 --train.min_lr=0 --train.warmup_steps=0 \
  --output.dir="$work/before"
heldout before "$work/before"
phase_done "before (1 step at lr 0, eval)"

echo "== 4. $objective_text with LoRA on 2 ranks: 30 steps of 4 pairs (global batch 8 rows)"
mpirun -np 2 "${mpirun_flags[@]}" "$bin" "${dpo[@]}" --train.steps=30 --train.warmup_steps=2 --train.lr=5e-4 \
  --output.dir="$work/dpo"
phase_done "$objective_text training"

echo "== 5. after: the trained adapters on the same held-out pairs"
heldout after "$work/dpo"
phase_done "after (eval)"

echo
echo "== result: SmolLM2-135M-Instruct, $objective_text for ISO dates over wrong formats, $n_heldout held-out pairs"
for k in rewards/accuracies rewards/margins rewards/chosen rewards/rejected logps/chosen logps/rejected loss; do
  printf '%-20s before %10.4f  ->  after %10.4f\n' "$k" "$(jq ".\"$k\"" "$work/before.json")" "$(jq ".\"$k\"" "$work/after.json")"
done
echo "time per part:"
printf '  %s\n' "${timings[@]}"
echo "  total                              $(printf '%4d' "$SECONDS") s"
