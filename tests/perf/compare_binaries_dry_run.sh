#!/usr/bin/env bash
# perf/compare_binaries.sh on two of its cases (1 rank, 2 ranks full_shard), 2 steps:
# 1. the binary against itself: exit 0, every case "identical", both sides' run directories
#    with their checkpoint, the hand-written NOTE.md kept, no staging directory left, and every
#    config.ini naming the published directory, not the staging one (perf/common.sh).
# 2. against a "new" binary that trains with another learning rate: exit 1, the cases named
#    DIFFERS with the losses' difference, and the results published (a difference is a result).
# 3. a "new" binary that fails: exit 1, the previous results kept as they were.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/perf/dry_run_lib.sh"
cmp=$MESHTRAIN_SOURCE_DIR/perf/compare_binaries.sh
# run NAME NEW: compare_binaries.sh MESHTRAIN_BIN NEW into ./out; output in NAME.log, status in $status.
run() {
  env MESHTRAIN="$MESHTRAIN_BIN" CASES="gpt2-1r gpt2-2r-full" STEPS=2 \
    timeout $((60 * time_scale)) bash "$cmp" "$MESHTRAIN_BIN" "$2" "$PWD/out" >"$1.log" 2>&1
  status=$?
}
# shellcheck disable=SC2016  # the wrappers expand their own arguments
printf '#!/usr/bin/env bash\nexec "%s" "$@" --train.lr=3e-3\n' "$MESHTRAIN_BIN" >other_lr && chmod +x other_lr
failing_binary failing

echo "--- 1. the binary against itself"
mkdir -p out && echo "hand-written commentary" >out/NOTE.md
run same "$MESHTRAIN_BIN"
[[ $status == 0 ]] || { cat same.log; fail "against itself: exit status $status, want 0"; finish; }
for c in gpt2-1r gpt2-2r-full; do
  grep -qx "$c: identical" same.log || fail "against itself: no '$c: identical'"
  for side in old new; do
    ls out/$c/$side/checkpoints/step_*.h5 >/dev/null 2>&1 || fail "$c/$side: no checkpoint"
    [[ $(jq -s length out/$c/$side/metrics.jsonl 2>/dev/null) -ge 2 ]] || fail "$c/$side: fewer than 2 metric rows"
    grep -qxF "dir = $PWD/out/$c/$side" out/$c/$side/config.ini ||
      fail "$c/$side/config.ini does not name the published directory: $(grep -n '^dir = /' out/$c/$side/config.ini)"
  done
done
[[ $(cat out/NOTE.md 2>/dev/null) == "hand-written commentary" ]] || fail "the run did not keep NOTE.md"
[[ ! -e out.partial ]] || fail "the staging directory out.partial is left after a run that finished"

echo "--- 2. against a binary with another learning rate"
run other "$PWD/other_lr"
[[ $status == 1 ]] || fail "another learning rate: exit status $status, want 1"
for c in gpt2-1r gpt2-2r-full; do
  grep -qx "$c: DIFFERS" other.log || fail "another learning rate: no '$c: DIFFERS'"
done
grep -q "metrics.jsonl losses differ" other.log || fail "another learning rate: the losses' difference is not named"
grep -q "lr = 0.003" out/gpt2-1r/new/config.ini || fail "another learning rate: its results were not published"
((failures)) && cat other.log

echo "--- 3. a new binary that fails"
cp -r out out.before
run failing "$PWD/failing"
[[ $status == 1 ]] || fail "failing: exit status $status, want 1"
grep -q "gpt2-1r/new: training failed" failing.log || { cat failing.log; fail "failing: the failed run is not named"; }
diff -r out.before out >/dev/null || fail "failing: the previous results changed"
finish "perf/compare_binaries.sh: identical against itself, a changed loss found, a failure keeps the previous results"
