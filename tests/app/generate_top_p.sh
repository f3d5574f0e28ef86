#!/usr/bin/env bash
# `meshtrain generate --top_p P --min_p P` (nucleus and min-p sampling, as Hugging Face's
# generate; the filter itself: test_sampling_filter) on a tiny GPT-2 after one training step on
# random tokens, byte vocabulary, a fixed seed:
#  * --top_p 1 and --min_p 0 are off: the text is byte for byte the default's (top-k 40 at
#    temperature 0.8, as before they existed);
#  * a --top_p below every token's probability (< 1 / vocabulary) leaves one token per step:
#    greedy's text (--temperature 0), whatever the seed and --top_k;
#  * the same seed gives the same text on 1 and 2 ranks, with top-p and min-p on;
#  * the log line names top-p and min-p; --help lists them;
#  * a value out of range: exit 2, one message, nothing on stdout, nothing written.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 1 "$MESHTRAIN_BIN" train "$tiny" --data.dir=random --train.steps=1 \
  --model.init_std=0.3 --train.eval_every=0 --train.sample_tokens=0 --output.dir=run >train.log 2>&1 ||
  { cat train.log; fail "training failed"; finish; }

# gen NP NAME ARGS...: `meshtrain generate` on NP ranks, 40 tokens after "ab"; stdout in
# NAME.out (compared byte for byte: the byte vocabulary's text need not be UTF-8), stderr in
# NAME.err.
gen() {
  local np=$1 name=$2
  shift 2
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" generate run/config.ini --prompt ab --tokens 40 \
    "$@" >"$name.out" 2>"$name.err" || { cat "$name.err" >&2; fail "generate $* on $np rank(s) failed"; return 1; }
}
# same A B WHAT: A.out and B.out are the same bytes.
same() {
  cmp -s "$1.out" "$2.out" || { od -c "$1.out" | head -4; od -c "$2.out" | head -4; fail "$3"; return 1; }
  echo "  $3: $(wc -c <"$1.out") bytes, the same"
}

echo "--- top-p 1 and min-p 0 are off"
gen 1 default --seed 5
gen 1 top_p_one --seed 5 --top_p 1
gen 1 both_off --seed 5 --top_p 1 --min_p 0
same default top_p_one "--top_p 1 == the default"
same default both_off "--top_p 1 --min_p 0 == the default"
grep -q "at temperature 0.8, top-k 40, top-p 1, min-p 0, seed 5 " default.err ||
  { cat default.err; fail "the log line does not name top-p and min-p"; }

echo "--- a nucleus of one token is greedy"
gen 1 greedy --temperature 0
# 264 tokens: the most likely holds at least 1/264 > 0.001.
gen 1 tiny_top_p --seed 5 --top_p 0.001
gen 1 tiny_top_p_all --seed 77 --top_p 0.001 --top_k 0 --temperature 1.5
same greedy tiny_top_p "--top_p 0.001 == --temperature 0"
same greedy tiny_top_p_all "--top_p 0.001 --top_k 0 --temperature 1.5 --seed 77 == --temperature 0"
# Sampling differs from greedy here (the test would not tell the nucleus from top-k otherwise).
cmp -s greedy.out default.out && fail "the default sampling gave greedy's text: the model is too sure to test with"

echo "--- the same seed, the same text on 1 and 2 ranks"
gen 1 nucleus_1 --seed 9 --top_p 0.6 --min_p 0.05 --top_k 0
gen 2 nucleus_2 --seed 9 --top_p 0.6 --min_p 0.05 --top_k 0
same nucleus_1 nucleus_2 "top-p 0.6, min-p 0.05 on 2 ranks == on 1 rank"
grep -q "at temperature 0.8, top-k 0, top-p 0.6, min-p 0.05, seed 9 " nucleus_2.err ||
  { cat nucleus_2.err; fail "the log line does not name --top_p 0.6 and --min_p 0.05"; }
gen 2 default_2 --seed 5
same default default_2 "the default on 2 ranks == on 1 rank"

help=$("$MESHTRAIN_BIN" generate --help) && [[ $help == *--top_k*--top_p*--min_p*--model.d_model* ]] ||
  fail "generate --help does not list --top_p and --min_p"

echo "--- values out of range (exit status 2, one message, nothing written)"
find run -printf '%p %s %T@\n' | sort >run_before.txt
expect_error() {
  local pattern=$1
  shift
  # shellcheck disable=SC2086
  timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" generate run/config.ini --prompt ab --tokens 4 "$@" \
    >out.log 2>err.log
  local status=$?
  [[ $status -eq 2 ]] || { cat err.log; fail "$*: exit status $status, expected 2"; }
  grep -qF -- "$pattern" err.log || { cat err.log; fail "$*: no message '$pattern'"; }
  [[ $(grep -c "error:" err.log) -eq 1 ]] || { cat err.log; fail "$*: expected one error line"; }
  [[ ! -s out.log ]] || fail "$*: something was written to stdout"
  grep "error:" err.log
}
expect_error "--top_p must be in (0, 1] (1 = off), not 0" --top_p 0
expect_error "--top_p must be in (0, 1] (1 = off), not 1.5" --top_p 1.5
expect_error "--top_p must be in (0, 1] (1 = off), not -0.1" --top_p=-0.1
expect_error "--top_p must be in (0, 1] (1 = off), not nan" --top_p nan
expect_error "--min_p must be in [0, 1] (0 = off), not 2" --min_p 2
expect_error "--min_p must be in [0, 1] (0 = off), not -0.5" --min_p=-0.5
find run -printf '%p %s %T@\n' | sort >run_after.txt
cmp -s run_before.txt run_after.txt || { diff run_before.txt run_after.txt; fail "a refused generate changed run/"; }
finish "generate --top_p/--min_p: off is the default's text, a tiny nucleus is greedy, 1 rank == 2 ranks, errors are clean"
