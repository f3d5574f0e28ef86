#!/usr/bin/env bash
# `meshtrain eval` and `meshtrain generate` are planned for a forward pass, not a training
# step (hunt s21, finding 1): the tiny GPT-2 after one training step, on one rank.
#  * eval at micro-batch 8 x 64 under parallel.memory_limit=5MiB runs: a training step of
#    that batch plans ~8 MiB (gradients, moments, saved activations), the forward ~3 MiB;
#  * under 2MiB eval is refused (exit 2) with what changes a forward pass's memory -- the
#    micro-batch -- and never activation checkpointing or gradients;
#  * generate under 1MiB (a training step at the config's 2 x 32 plans ~3 MiB) runs, and a
#    train.seq_len longer than model.max_seq_len, which generate does not use, does not stop it;
#  * under 256KiB generate is refused naming --tokens, not checkpointing;
#  * the memory each run used after the load (the pool's peak) is at most what it planned;
#  * generate in bf16 holds the bf16 weights alone (the forward-only engine keeps no fp32
#    master: FsdpEngine::compute_only): it plans and peaks below fp32's (no_shard: it planned
#    751 KiB against fp32's 556 and peaked at 726 against 506 while the master was kept);
#  * on 2 ranks with parallel.strategy=auto, generate and eval are ranked by a forward pass
#    (plan::predict_step): with the parameters fitting on each rank the pick is no_shard,
#    which communicates nothing, not a strategy that gathers the model for every token.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
tiny=$MESHTRAIN_SOURCE_DIR/inputs/tiny-gpt2.ini

# run LABEL ARGS...: `meshtrain ARGS` on one rank (RANKS=n: n ranks); sets $rc; output in
# out.txt / err.txt.
run() {
  local label=$1
  shift
  echo "--- $label: $*"
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  timeout $((60 * time_scale)) $MPIEXEC -n "${RANKS:-1}" "$MESHTRAIN_BIN" "$@" >out.txt 2>err.txt
  rc=$?
  sed 's/^/  stdout: /' out.txt
  sed 's/^/  stderr: /' err.txt
  echo "  exit status $rc"
}

# peak_within_plan COMMAND: the debug line "COMMAND: memory peak X in use ...; planned Y per
# rank" (on stdout for eval, on stderr for generate, whose stdout is the text) says the pool's
# peak after the load is at most the plan.
peak_within_plan() {
  local line
  line=$(grep -h "$1: memory peak" out.txt err.txt) || { fail "$1: no memory line at log level debug"; return; }
  echo "$line" | awk '
    function bytes(v, u) { return v * (u == "GiB" ? 2^30 : u == "MiB" ? 2^20 : u == "KiB" ? 2^10 : 1) }
    { for (i = 1; i <= NF; i++) { if ($i == "peak") peak = bytes($(i + 1), $(i + 2)); if ($i == "planned") plan = bytes($(i + 1), $(i + 2)) } }
    END { exit !(peak > 0 && plan >= peak) }' || fail "$1: the measured peak is above the plan: $line"
}

run "train one step" train "$tiny" --data.dir=random --train.steps=1 --train.eval_every=0 --output.dir=run
[[ $rc -eq 0 ]] || { fail "training failed"; exit 1; }

eval_args=(eval run/config.ini --data.dir=random --batches 1 --train.micro_batch=8 --train.seq_len=64
  --train.global_batch=8 --output.log_level=debug)
run "eval in 5MiB" "${eval_args[@]}" --parallel.memory_limit=5MiB
[[ $rc -eq 0 ]] || fail "eval under parallel.memory_limit=5MiB: exit status $rc (planned as a training step?)"
peak_within_plan eval
run "eval in 2MiB" "${eval_args[@]}" --parallel.memory_limit=2MiB
[[ $rc -eq 2 ]] || fail "eval under parallel.memory_limit=2MiB: exit status $rc, not 2"
grep "error:" err.txt | grep -qF "train.micro_batch" || fail "eval refusal: does not name train.micro_batch"
grep "error:" err.txt | grep -Eq "activation_checkpointing|gradients|optimizer" &&
  fail "eval refusal: names checkpointing, gradients or the optimizer, which a forward pass has none of"

gen_args=(generate run/config.ini --prompt "Hello" --tokens 8 --temperature 0 --output.log_level=debug)
run "generate in 1MiB" "${gen_args[@]}" --parallel.memory_limit=1MiB --train.seq_len=1000
[[ $rc -eq 0 ]] || fail "generate under parallel.memory_limit=1MiB with train.seq_len=1000: exit status $rc"
peak_within_plan generate
# planned_and_peak COMMAND: "PLANNED PEAK" in bytes from the debug memory line.
planned_and_peak() {
  grep -h "$1: memory peak" out.txt err.txt | awk '
    function bytes(v, u) { return v * (u == "GiB" ? 2^30 : u == "MiB" ? 2^20 : u == "KiB" ? 2^10 : 1) }
    { for (i = 1; i <= NF; i++) { if ($i == "peak") peak = bytes($(i + 1), $(i + 2)); if ($i == "planned") plan = bytes($(i + 1), $(i + 2)) } }
    END { printf "%d %d\n", plan, peak }'
}
run "generate fp32, no_shard" "${gen_args[@]}" --train.precision=fp32 --parallel.strategy=no_shard
[[ $rc -eq 0 ]] || fail "generate in fp32: exit status $rc"
read -r fp32_plan fp32_peak < <(planned_and_peak generate)
run "generate bf16, no_shard" "${gen_args[@]}" --train.precision=bf16 --parallel.strategy=no_shard
[[ $rc -eq 0 ]] || fail "generate in bf16: exit status $rc"
peak_within_plan generate
read -r bf16_plan bf16_peak < <(planned_and_peak generate)
echo "generate no_shard: fp32 plans $fp32_plan B, peaks at $fp32_peak B; bf16 plans $bf16_plan B, peaks at $bf16_peak B"
((bf16_plan > 0 && bf16_plan < fp32_plan)) || fail "generate: bf16 plans $bf16_plan B, not below fp32's $fp32_plan B"
((bf16_peak > 0 && bf16_peak < fp32_peak)) || fail "generate: bf16 peaks at $bf16_peak B, not below fp32's $fp32_peak B"
run "generate in 256KiB" "${gen_args[@]}" --parallel.memory_limit=256KiB
[[ $rc -eq 2 ]] || fail "generate under parallel.memory_limit=256KiB: exit status $rc, not 2"
grep "error:" err.txt | grep -qF -- "--tokens" || fail "generate refusal: does not name --tokens"
grep "error:" err.txt | grep -Eq "activation_checkpointing|train.micro_batch" &&
  fail "generate refusal: names checkpointing or train.micro_batch, which generate does not use"

# chosen_strategy COMMAND STRATEGY WHAT: the debug line "COMMAND: mesh M, strategy S (why)"
# names STRATEGY, ranked by WHAT.
chosen_strategy() {
  local line
  line=$(grep -h "$1: mesh .*, strategy" out.txt err.txt | head -n 1) || { fail "$1: no strategy line at log level debug"; return; }
  [[ $line == *"strategy $2 ("* ]] || fail "$1 on 2 ranks: not $2: $line"
  [[ $line == *"fastest predicted $3 that fits"* ]] || fail "$1 on 2 ranks: not ranked by a $3: $line"
}
RANKS=2 run "generate on 2 ranks, auto" "${gen_args[@]}" --parallel.strategy=auto --parallel.tp=1
[[ $rc -eq 0 ]] || fail "generate on 2 ranks: exit status $rc"
chosen_strategy generate no_shard "forward pass per generated token"
RANKS=2 run "eval on 2 ranks, auto" eval run/config.ini --data.dir=random --batches 1 --train.micro_batch=4 \
  --train.seq_len=64 --train.global_batch=8 --output.log_level=debug --parallel.strategy=auto --parallel.tp=1
[[ $rc -eq 0 ]] || fail "eval on 2 ranks: exit status $rc"
chosen_strategy eval no_shard "forward pass of the eval batch"

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "forward_memory_plan: all checks passed"
