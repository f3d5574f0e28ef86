#!/usr/bin/env bash
# perf/gpu/fallback.py on fixture self-check outputs: the gpu.* keys validate.sh gives every
# meshtrain run for the fused paths that did not pass -- none when all passed or are not in
# the build; a failed path's keys with the path named; after a crash, every group without a
# result and the last reporting group; a failed path without a key reported, not guessed; and
# every path tests/selfcheck/selfcheck_paths.cpp defines has a known group.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
F=$MESHTRAIN_SOURCE_DIR/perf/gpu/fallback.py
d=${TEST_TMP:-/tmp/gpu_fallback}
rm -rf "$d" && mkdir -p "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }
keys() { cut -f1 "$1" | tr '\n' ' ' | sed 's/ $//'; }

cat > "$d/pass.txt" <<'SC'
selfcheck_paths: 5 paths on the device (Cuda), each against the path it replaces and a double reference
PASS fused_optimizer.adamw_multi (fine)
SKIP attention.cudnn (this build has no cuDNN attention)
PASS fused_norms.residual_layernorm (fine)
PASS row_packs.swiglu (packs vs elements bitwise)
PASS graphs.step (bitwise)
selfcheck_paths: 4 of 5 paths passed, 1 not in this build (SKIP)
SC
python3 "$F" "$d/pass.txt" 0 > "$d/out" 2> "$d/err" || fail "exit $? on a passing self-check"
[[ ! -s $d/out ]] || fail "keys for a self-check that passed: $(cat "$d/out")"

# One norm path fails: the fused norms and the norm form go back, nothing else.
sed 's/^PASS fused_norms.residual_layernorm (fine)/FAIL fused_norms.residual_layernorm: dx 0.3 vs double/' \
  "$d/pass.txt" > "$d/norms.txt"
python3 "$F" "$d/norms.txt" 1 > "$d/out" 2> "$d/err" || fail "exit $? with a failed path"
[[ $(keys "$d/out") == "gpu.fused_norms=false gpu.norm_form=rows" ]] || fail "a failed norm path's keys: $(cat "$d/out")"
grep -qP '^gpu.fused_norms=false\tfused_norms.residual_layernorm FAIL$' "$d/out" || fail "the reason names the path: $(cat "$d/out")"

# Two graph paths fail: the key once, both named.
printf 'FAIL graphs.step: replay differs\nFAIL graphs.step_packed: capture refused\n' >> "$d/pass.txt"
python3 "$F" "$d/pass.txt" 1 > "$d/out" 2> "$d/err"
[[ $(keys "$d/out") == "gpu.graphs=false" ]] || fail "one key per group: $(cat "$d/out")"
grep -q 'graphs.step FAIL; graphs.step_packed FAIL' "$d/out" || fail "both graph paths named: $(cat "$d/out")"

# A crash (139) during the cuDNN attention: what reported PASS before it stays on; the rest,
# and any other path of the group that last reported, are off.
cat > "$d/crash.txt" <<'SC'
PASS fused_optimizer.adamw_multi (fine)
PASS fused_optimizer.grad_norm (fine)
PASS packed.position_embedding_backward (fine)
PASS attention.cudnn (fine)
SC
python3 "$F" "$d/crash.txt" 139 > "$d/out" 2> "$d/err" || fail "exit $? after a crash"
[[ $(keys "$d/out") == "gpu.attention=kokkos gpu.fused_loss=false gpu.fused_norms=false gpu.norm_form=rows gpu.row_packs=false gpu.graphs=false gpu.epilogues=false" ]] ||
  fail "after a crash: $(keys "$d/out")"
grep -q 'no result (selfcheck_paths stopped, status 139)' "$d/out" || fail "the crash is the reason: $(cat "$d/out")"
# Timed out (124) with nothing reported, or never run (127): everything off.
python3 "$F" "$d/absent.txt" 127 > "$d/out" 2> "$d/err" || fail "exit $? without output"
[[ $(wc -l < "$d/out") == 8 ]] || fail "no self-check output: every key off: $(cat "$d/out")"

# A failed path without a key (packed rows) and an unknown one: reported, no key invented.
printf 'FAIL packed.attention_document_mask: out 0.2\nFAIL mystery.path: boom\nPASS graphs.step (ok)\n' > "$d/nokey.txt"
python3 "$F" "$d/nokey.txt" 1 > "$d/out" 2> "$d/err" || fail "exit $? with keyless failures"
[[ ! -s $d/out ]] || fail "keys invented: $(cat "$d/out")"
grep -q 'packed.attention_document_mask FAILed; no key turns it off' "$d/err" || fail "the packed path is reported: $(cat "$d/err")"
grep -q 'mystery.path FAILed and has no known key' "$d/err" || fail "the unknown path is reported: $(cat "$d/err")"

# Every path the self-check defines belongs to a group fallback.py knows.
grep -oE '^\s*\{"[a-z_]+\.[a-z_0-9]+",' "$MESHTRAIN_SOURCE_DIR/tests/selfcheck/selfcheck_paths.cpp" |
  sed -E 's/^\s*\{"([^"]+)",/FAIL \1: x/' > "$d/all.txt"
n=$(wc -l < "$d/all.txt")
(( n >= 20 )) || fail "found only $n path names in selfcheck_paths.cpp"
python3 "$F" "$d/all.txt" 1 > "$d/out" 2> "$d/err" || fail "exit $? on every path"
if grep -q 'no known key' "$d/err"; then fail "paths fallback.py does not know: $(grep 'no known key' "$d/err")"; fi

python3 "$F" > /dev/null 2>&1 && fail "no arguments accepted"
echo "gpu_fallback: all cases passed ($n self-check paths known)"
