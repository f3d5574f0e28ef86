#!/usr/bin/env bash
# perf/bench_generate.sh (4 tokens, 1 rep; timings are not checked) with a relative OUT_DIR
# (the runs happen in a scratch directory): results.json with both models, each with and
# without the KV cache at the 512-token context, positive times and speedups, results.md with
# both rows. Then with a binary whose text without the cache differs: the script must stop
# naming the model, and leave the previous results as they were.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
bench=$MESHTRAIN_SOURCE_DIR/perf/bench_generate.sh
# run NAME BINARY: bench_generate.sh into ./out (relative), its output in NAME.log, status in $status.
run() {
  env PERF_MAX_LOAD=1000 PERF_IDLE_MAX=0 MESHTRAIN="$2" TOKENS=4 REPS=1 \
    timeout $((90 * time_scale)) bash "$bench" out >"$1.log" 2>&1
  status=$?
}

echo "--- 1. both models, with and without the cache"
run bench "$MESHTRAIN_BIN"
if [[ $status != 0 ]]; then
  cat bench.log
  fail "bench_generate.sh: exit status $status"
  finish
fi
"$py" - out <<'PY' || fail "the results are incomplete (above)"
import json, math, os, sys
out = sys.argv[1]
r = json.load(open(os.path.join(out, "results.json")))
assert r["tokens"] == 4 and r["reps"] == 1 and set(r["models"]) == {"gpt2", "llama"}, r
for m, x in r["models"].items():
    for mode in ("cache", "nocache"):
        y = x[mode]
        assert y["context"] == 512 and y["ms_per_token"] > 0 and y["first_token_s"] > 0, (m, mode, y)
    assert math.isfinite(x["speedup_per_token"]) and x["speedup_per_token"] > 0, (m, x)
md = open(os.path.join(out, "results.md")).read()
assert sum(l.startswith(("| gpt2 |", "| llama |")) for l in md.splitlines()) == 2, md
for f in ("machine.json", "gen-gpt2-cache-1.err", "gen-llama-nocache-1.err"):
    assert os.path.getsize(os.path.join(out, f)) > 0, f
PY
before=$(cat out/results.json)

echo "--- 2. a binary whose greedy text without the KV cache differs"
printf '#!/usr/bin/env bash\n"%s" "$@" || exit\n[[ " $* " == *" --no_kv_cache "* ]] && echo " and more"\nexit 0\n' \
  "$MESHTRAIN_BIN" >differs && chmod +x differs
run differs "$PWD/differs"
if [[ $status == 0 ]] || ! grep -q "bench_generate: gpt2: greedy text differs with and without the KV cache" differs.log; then
  cat differs.log
  fail "a text that differs without the cache: status $status, want a failure naming gpt2"
fi
[[ $(cat out/results.json 2>/dev/null) == "$before" ]] || fail "the failed run changed the previous results in out/"
finish "perf/bench_generate.sh: both models with and without the KV cache (relative OUT_DIR); a differing text refused, results kept"
