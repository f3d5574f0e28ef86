#!/usr/bin/env bash
# Plain `meshtrain ...` processes (isolated Open MPI singletons) running at the same time
# on one host: all isolated singletons share a job id, and before each got its own session
# directory one of them exiting deleted the MPI-IO files of another's checkpoint save (a
# failure under load in train_lora_settings). Two runs that save a checkpoint every step
# while short-lived singletons start and exit must both finish, and no session directory may
# stay behind (doc/running.md), nor one of a process killed with SIGKILL once the next starts.
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

# A singleton killed before its exit handlers run (SIGKILL, the OOM killer) leaves its
# directory; the next meshtrain to start removes it -- and no other: not one whose owner file
# a live process holds locked, not one without an owner file, not a symbolic link, not
# another host's (its lock may not be seen here), not a directory of another name.
"$MESHTRAIN_BIN" train --data.dir=random --model.d_model=64 --model.n_layers=2 --model.n_heads=4 \
  --model.vocab_size=256 --model.max_seq_len=32 --train.steps=100000 --train.seq_len=32 --train.micro_batch=2 \
  --train.eval_every=0 --output.dir=run_killed >run_killed.log 2>&1 &
k=$!
for _ in $(seq 1 600); do
  compgen -G "$TMPDIR/meshtrain-mpi-*/owner.lock" >/dev/null && break
  sleep 0.1
done
kill -KILL "$k"
wait "$k" 2>/dev/null
killed=$(compgen -G "$TMPDIR/meshtrain-mpi-*" || true)
[[ -n $killed && -f $killed/owner.lock ]] || fail "the killed run had no session directory with an owner file: '$killed'"
prefix=$(basename "${killed:-meshtrain-mpi-unknown_XXXXXX}")
prefix=${prefix%??????}  # meshtrain-mpi-<host>_
mkdir -p "$TMPDIR/${prefix}nolock" "$TMPDIR/${prefix}held00" "$TMPDIR/meshtrain-mpi-otherhost_abcdef" \
  "$TMPDIR/other-dir" elsewhere
touch "$TMPDIR/${prefix}held00/owner.lock" "$TMPDIR/meshtrain-mpi-otherhost_abcdef/owner.lock" \
  "$TMPDIR/other-dir/owner.lock" elsewhere/owner.lock
ln -s "$TEST_TMP/elsewhere" "$TMPDIR/${prefix}link00"
# The holder is the locking shell itself, exec'd into sleep: killing it releases the lock.
(exec 9>"$TMPDIR/${prefix}held00/owner.lock" && flock 9 && exec sleep 300) </dev/null >/dev/null 2>&1 &
holder=$!
for _ in $(seq 1 600); do  # until the holder has the lock
  flock -n "$TMPDIR/${prefix}held00/owner.lock" true || break
  sleep 0.1
done
flock -n "$TMPDIR/${prefix}held00/owner.lock" true && fail "the stand-in holder never took its lock"
"$MESHTRAIN_BIN" --version >/dev/null 2>&1 || fail "meshtrain --version failed beside abandoned session directories"
[[ -n $killed && ! -e $killed ]] || fail "the killed run's session directory $killed stayed after the next start"
for kept in "${prefix}nolock" "${prefix}held00" "${prefix}link00" meshtrain-mpi-otherhost_abcdef other-dir; do
  [[ -e $TMPDIR/$kept ]] || fail "$kept was removed: it is not an abandoned session directory"
done
[[ -f elsewhere/owner.lock ]] || fail "a symbolic link's target was emptied"
kill "$holder"
wait "$holder" 2>/dev/null
"$MESHTRAIN_BIN" --version >/dev/null 2>&1 || fail "meshtrain --version failed"
[[ ! -e $TMPDIR/${prefix}held00 ]] || fail "a session directory whose owner has ended stayed after the next start"

((failures == 0)) && echo "PASS: concurrent singletons keep their own session directories; killed ones' are removed by the next start"
exit $((failures > 0))
