#!/usr/bin/env bash
# perf/bench_prepare.sh on a 1 MB document with the byte tokenizer and a SentencePiece BPE and
# unigram model, 1 run each, this meshtrain also as BASELINE (timings are not checked, only
# present and positive):
# 1. results.json and results.md: every case, meshtrain's token count agreeing with the
#    sentencepiece reference's (the unigram's: the count of the text encoded in meshtrain's
#    stretches, beside its whole encode's), peaks and seconds positive, the baseline columns
#    present.
# 2. An unknown tokenizer in TOKENIZERS and SIZE_MB=0 are refused (exit 2); a meshtrain that
#    fails: exit 1 naming the run, the previous results left as they were.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
# bench NAME BIN [ENV...]: bench_prepare.sh into ./bp; output in NAME.log, status in $status.
bench() {
  local name=$1 bin=$2
  shift 2
  env PERF_MAX_LOAD=1000 PERF_IDLE_MAX=0 MESHTRAIN="$bin" SIZE_MB=1 REPS=1 TOKENIZERS="byte sp-bpe sp-unigram" "$@" \
    timeout $((120 * time_scale)) bash "$MESHTRAIN_SOURCE_DIR/perf/bench_prepare.sh" "$PWD/bp" >"$name.log" 2>&1
  status=$?
}
failing_binary prepare_fails

echo "--- 1. byte, sp-bpe and sp-unigram, with a baseline"
bench run "$MESHTRAIN_BIN" BASELINE="$MESHTRAIN_BIN"
[[ $status == 0 ]] || { cat run.log; fail "bench_prepare.sh: exit status $status"; finish; }
"$py" - bp <<'PY' || fail "the results are incomplete or wrong (above)"
import json, math, sys
out = sys.argv[1]
r = json.load(open(f"{out}/results.json"))
pos = lambda x: isinstance(x, (int, float)) and math.isfinite(x) and x > 0
assert r["size_bytes"] == 1000000 and r["reps"] == 1, r
assert [c["tokenizer"] for c in r["cases"]] == ["byte", "sp-bpe", "sp-unigram"], r["cases"]
byte, sp, uni = r["cases"]
assert byte["meshtrain"]["tokens"] == 1000001 and "peer" not in byte, byte  # a token a byte + end-of-text
for c in r["cases"]:
    for side in ("meshtrain", "baseline"):
        s = c[side]
        assert len(s["s"]) == 1 and pos(s["s"][0]) and pos(s["median_peak_mib"]) and pos(s["peak_per_input_byte"]), c
    assert pos(c["baseline_s_over_meshtrain_s"]), c
assert sp["peer"]["name"] == "sentencepiece" and pos(sp["peer"]["median_s"]) and pos(sp["peer_s_over_meshtrain_s"]), sp
assert sp["tokens_agree"] is True and sp["meshtrain"]["tokens"] == sp["peer"]["tokens"] + 2, sp
assert "tokens_in_stretches" not in sp["peer"], sp
assert uni["tokens_agree"] is True and uni["meshtrain"]["tokens"] == uni["peer"]["tokens_in_stretches"] + 2, uni
assert pos(uni["peer"]["tokens"]), uni
rows = [l for l in open(f"{out}/results.md") if l.startswith(("| byte |", "| sp-bpe |", "| sp-unigram |"))]
assert len(rows) == 3 and "sentencepiece |" in rows[1] and "DIFFER" not in rows[1] + rows[2], rows
assert "(whole: " in rows[2], rows
print("bench_prepare: byte, sp-bpe and sp-unigram, tokens", byte["meshtrain"]["tokens"], sp["meshtrain"]["tokens"],
      uni["meshtrain"]["tokens"], "(whole-text encode:", uni["peer"]["tokens"], ")")
PY
grep -q "^| sp-bpe |" run.log || fail "the table was not printed"

echo "--- 2. refusals and a failing meshtrain"
bench bad_tok "$MESHTRAIN_BIN" TOKENIZERS="byte bogus"
[[ $status == 2 ]] && grep -q "unknown tokenizer 'bogus'" bad_tok.log || { cat bad_tok.log; fail "TOKENIZERS=bogus: status $status, want 2"; }
bench bad_size "$MESHTRAIN_BIN" SIZE_MB=0
[[ $status == 2 ]] && grep -q "SIZE_MB=0" bad_size.log || { cat bad_size.log; fail "SIZE_MB=0: status $status, want 2"; }
cp bp/results.json results.before
bench failing "$PWD/prepare_fails" TOKENIZERS=byte
[[ $status == 1 ]] && grep -q "meshtrain prepare with byte (run 1) failed" failing.log ||
  { cat failing.log; fail "a failing meshtrain: status $status, want 1 naming the run"; }
cmp -s results.before bp/results.json || fail "a failed run replaced the previous results"
finish
