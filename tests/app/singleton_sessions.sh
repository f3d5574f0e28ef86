#!/usr/bin/env bash
# Plain `meshtrain ...` processes (isolated Open MPI singletons) running at the same time
# on one host: all isolated singletons share a job id, and before each got its own session
# directory one of them exiting deleted the MPI-IO files of another's checkpoint save (a
# failure under load in train_lora_settings). Two runs that save a checkpoint every step
# while short-lived singletons start and exit must both finish, and no session directory may
# stay behind (doc/running.md).
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP/tmp"
cd "$TEST_TMP" || exit 1
export TMPDIR=$TEST_TMP/tmp  # where meshtrain makes the private session directories
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

train() {
  "$MESHTRAIN_BIN" train --data.dir=random --model.d_model=64 --model.n_layers=2 --model.n_heads=4 \
    --model.vocab_size=256 --model.max_seq_len=32 --train.steps=30 --train.seq_len=32 --train.micro_batch=2 \
    --checkpoint.every=1 --checkpoint.keep=2 --output.dir="$1" >"$1.log" 2>&1
}
train run_a & a=$!
train run_b & b=$!
for _ in $(seq 1 40); do "$MESHTRAIN_BIN" --version >/dev/null 2>&1 || fail "meshtrain --version failed"; done
wait "$a" || { tail -5 run_a.log; fail "run_a failed while other singletons came and went"; }
wait "$b" || { tail -5 run_b.log; fail "run_b failed while other singletons came and went"; }
left=$(find "$TMPDIR" -mindepth 1 -maxdepth 1 | wc -l)
((left == 0)) || { ls -la "$TMPDIR"; fail "$left session directories stayed behind in \$TMPDIR"; }
"$MESHTRAIN_BIN" train --bogus >/dev/null 2>&1  # a user error (exit 2) cleans up as well
left=$(find "$TMPDIR" -mindepth 1 -maxdepth 1 | wc -l)
((left == 0)) || fail "a failed command left $left session directories behind"
((failures == 0)) && echo "PASS: concurrent singletons keep their own session directories"
exit $((failures > 0))
