#!/usr/bin/env bash
# `meshtrain eval` and `meshtrain generate` on checkpoints of a short run on the fortunes
# corpus (2 ranks, FSDP, evaluation every 10 steps, a sample at the end):
#  * eval of the final checkpoint with the run's config.ini reproduces the val_loss the run
#    logged at that step: bitwise on the training mesh, within 1e-6 (relative; reduction
#    order) on 1 rank; the same for the step-10 checkpoint picked with --checkpoint and for
#    the safetensors export of the final one; the perplexity is exp(loss); --batches 0
#    covers the whole validation split;
#  * generate with the trainer's sampling settings (temperature 0.8, top-k 40, top-p 0.9,
#    min-p 0.02, seed train.seed) reproduces the trainer's end-of-run sample exactly; 1 rank
#    generates too;
#  * user errors: no checkpoint, a config describing another model, bad sampling options
#    -> exit status 2 with one message.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

"$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes --output data >/dev/null || { fail "prepare failed"; finish; }
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" train "$tiny" --data.dir=data --train.steps=30 --train.eval_every=10 \
  --checkpoint.every=10 --train.sample_tokens=60 "--train.sample_prompt=Q: " --train.sample_top_p=0.9 \
  --train.sample_min_p=0.02 --output.dir=run >train.log 2>&1 ||
  { cat train.log; fail "training failed"; finish; }
cfg=run/config.ini

# eval_json NP ARGS...: the JSON line of `meshtrain eval --json` (stdout also in eval_*.log).
n=0
eval_json() {
  local np=$1
  shift
  n=$((n + 1))
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" eval "$cfg" --json "$@" >"eval_$n.log" 2>&1 || { cat "eval_$n.log"; return 1; }
  grep '^eval:' "eval_$n.log" >&2
  grep '^{' "eval_$n.log"
}
# check_loss JSON STEP RTOL [STORED_STEP]: the eval loss equals metrics.jsonl's val_loss at
# STEP; the JSON's step is STORED_STEP (default STEP; -1 for safetensors).
check_loss() {
  "$py" - "$1" run/metrics.jsonl "$2" "$3" "${4:-$2}" <<'EOF'
import json, math, sys
got = json.loads(sys.argv[1])
ref = {r["step"]: r for r in map(json.loads, open(sys.argv[2]))}[int(sys.argv[3])]["val_loss"]
rtol = float(sys.argv[4])
err = abs(got["loss"] - ref) / abs(ref)
print(f"  eval loss {got['loss']!r} vs logged val_loss {ref!r} at step {sys.argv[3]}: rel err {err:.1e} (rtol {rtol:g})")
ok = (got["loss"] == ref) if rtol == 0 else err <= rtol
ok &= abs(got["perplexity"] - math.exp(got["loss"])) <= 1e-9 * got["perplexity"] and got["step"] == int(sys.argv[5])
sys.exit(0 if ok else 1)
EOF
}

echo "--- eval"
j=$(eval_json 2) && check_loss "$j" 30 0 || fail "eval on 2 ranks (the run's newest checkpoint) != logged val_loss"
# Another mesh: 1 rank; 1e-6 covers a different summation order of the same fp32 logits.
j=$(eval_json 1) && check_loss "$j" 30 1e-6 || fail "eval on 1 rank != logged val_loss"
j=$(eval_json 2 --checkpoint run/checkpoints/step_00000010.h5) && check_loss "$j" 10 0 ||
  fail "eval of the step-10 checkpoint != logged val_loss at step 10"
# The same weights as a Hugging Face directory (meshtrain convert, fp32 safetensors).
"$MESHTRAIN_BIN" convert --input run/checkpoints --output hf >convert.log 2>&1 || { cat convert.log; fail "convert failed"; }
j=$(eval_json 2 --checkpoint hf) && check_loss "$j" 30 0 -1 || fail "eval of the safetensors export != logged val_loss"
val_tokens=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["val_tokens"])' data/meta.json)
j=$(eval_json 2 --batches 0) && "$py" - "$j" "$val_tokens" <<'EOF' ||
import json, sys
j, tokens = json.loads(sys.argv[1]), int(sys.argv[2])
# Every non-overlapping window of 32 (+1) tokens exactly once (the last micro-batch is
# padded with masked windows; tests/app/eval_whole_split.sh checks 1, 2 and 3 ranks).
per_pass = (tokens - 1) // 32
print(f"  whole split: {j['windows']:.0f} of {per_pass} windows -> loss {j['loss']:.4f}")
sys.exit(0 if j["windows"] == per_pass and j["tokens"] == per_pass * 32 else 1)
EOF
  fail "eval --batches 0 did not cover the whole validation split"

echo "--- generate"
expected=$(sed -n '/^--- sample (60 tokens, temperature 0.8, top-k 40, top-p 0.9, min-p 0.02) ---$/,/^---$/p' train.log |
  sed '1d;$d')
[[ -n $expected ]] || fail "the training run printed no sample"
gen() {
  local np=$1
  shift
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" generate "$cfg" "$@" 2>"gen_$np.err"
}
out=$(gen 2 "--prompt=Q: " --tokens 60 --temperature 0.8 --top_k 40 --top_p 0.9 --min_p 0.02 --seed 1234) ||
  { cat gen_2.err; fail "generate failed"; }
printf 'trainer sample:  %q\ngenerate (np 2): %q\n' "$expected" "$out"
[[ $out == "$expected" ]] || fail "generate on 2 ranks differs from the trainer's sample with the same settings"
out1=$(gen 1 "--prompt=Q: " --tokens 40 --temperature 0 --checkpoint run/checkpoints) || { cat gen_1.err; fail "generate on 1 rank failed"; }
printf 'greedy (np 1):   %q\n' "$out1"
[[ $out1 == "Q: "?* ]] || fail "greedy generate on 1 rank did not continue the prompt"

echo "--- user errors (exit status 2, one message)"
expect_error() {
  local what=$1 pattern=$2
  shift 2
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "$@" >err.log 2>&1
  local status=$?
  [[ $status -eq 2 ]] || fail "$what: exit status $status, expected 2"
  grep -q "$pattern" err.log || { cat err.log; fail "$what: no message matching '$pattern'"; }
  [[ $(grep -c "error:" err.log) -eq 1 ]] || fail "$what: expected one error line"
  grep "error:" err.log
}
expect_error "no checkpoint" "no checkpoint found in empty/checkpoints: pass --checkpoint PATH" \
  eval "$cfg" --output.dir=empty
expect_error "another model" "d_model" eval "$cfg" --model.d_model=32
expect_error "bad temperature" "\-\-temperature must be >= 0" generate "$cfg" --temperature=-1
expect_error "bad top-p" "\-\-top_p must be in (0, 1]" generate "$cfg" --top_p=3
expect_error "unknown option" "unknown config key\|unrecognised\|unrecognized\|--typical_p" generate "$cfg" --typical_p=0.5
help=$("$MESHTRAIN_BIN" eval --help) && [[ $help == *--checkpoint*--batches*--model.d_model* ]] ||
  fail "eval --help does not list its options and the configuration keys"
help=$("$MESHTRAIN_BIN" generate --help) && [[ $help == *--prompt*--temperature*--top_k*--top_p*--min_p*--model.d_model* ]] ||
  fail "generate --help does not list its options and the configuration keys"
finish "eval reproduces the logged validation loss; generate reproduces the trainer's sample; errors are clean"
