#!/usr/bin/env bash
# One run per directory (issue 28): a run holds an advisory lock on <output.dir>/.meshtrain.lock
# and on checkpoint.dir's (also the default one inside output.dir) from before it reads or writes
# anything there until it ends. Deterministic, no timing:
#   1. another process holds the lock (a python flock holder that wrote host and pid): a
#      second train on 1 and 2 ranks exits 2 with one message naming host and pid, and no
#      file of the directory changed (sha256 of every file before/after, no file added);
#   2. the same for a checkpoint.dir shared with another run: refused, and the fresh
#      output.dir it would have used is not left behind;
#   3. the holder gone, its lock file still there (stale): the next run trains normally;
#      a run killed mid-training (MESHTRAIN_FAULT kill) does not block its resume either;
#   4. two real runs: run A is frozen at step 3 (MESHTRAIN_FAULT action=stop, SIGSTOP);
#      run B into A's directory is refused (exit 2, A's host and pid), and so is run C with
#      its own output.dir but A's default checkpoint.dir; nothing changed;
#      after SIGCONT, A finishes with exit 0 and every one of its metric lines.
# Environment (meshtrain_add_script_test): MESHTRAIN_BIN, MESHTRAIN_SOURCE_DIR, MPIEXEC, TEST_TMP.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
# shellcheck source=../batch/batch_lib.sh
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
host=$(hostname)
common=(--data.dir=random --train.eval_every=0 --train.peak_tflops=1 --train.log_every=1)

# train LOG NP ARGS...: a tiny run; its exit status.
train() {
  local log=$1 np=$2
  shift 2
  # shellcheck disable=SC2086  # MPIEXEC is a command with flags
  timeout $((120 * time_scale)) $MPIEXEC -n "$np" "$MESHTRAIN_BIN" train "$tiny" "${common[@]}" "$@" >"$log" 2>&1
}
# Every directory, and every file with its sha256.
snapshot() { find "$@" -type d | sort; find "$@" -type f -print0 | sort -z | xargs -0 -r sha256sum; }
# expect_refused LOG STATUS DIR KEY PID: exit 2, exactly one error line naming KEY=DIR, host and PID.
expect_refused() {
  local log=$1 status=$2 dir=$3 key=$4 pid=$5
  [[ $status == 2 ]] || { cat "$log"; fail "$log: exit status $status, expected 2"; }
  grep -qF "$key=$dir is in use by another meshtrain run (host $host pid $pid holds $dir/.meshtrain.lock)" "$log" ||
    { cat "$log"; fail "$log: the refusal does not name host $host and pid $pid"; }
  (($(grep -c 'error' "$log") == 1)) || { cat "$log"; fail "$log: not exactly one error line"; }
  ! grep -qiE 'MPI_ABORT|terminate called|Segmentation' "$log" || { cat "$log"; fail "$log: crash output"; }
}

# A finished run to protect: checkpoints, metrics, records.
train first.log 1 --output.dir=run --train.steps=4 --checkpoint.every=2 || { cat first.log; fail "the first run failed"; }
[[ ! -e run/.meshtrain.lock ]] || fail "a finished run left its lock file"

# ---- 1. a lock held by another process ------------------------------------------------
# hold FILE: a background process holds flock(FILE) (the lock meshtrain takes), having
# written "host H pid P" into it as meshtrain does, until fd 3 is closed; $holder is its pid.
cat >holder.py <<'PYEOF'
import fcntl, os, sys
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
f.truncate(0); f.write(f"host {sys.argv[2]} pid {os.getpid()}\n"); f.flush()
print("locked", flush=True)
sys.stdin.read()  # until the test closes the pipe
PYEOF
hold() {
  rm -f hold.fifo holder.out && mkfifo hold.fifo
  "$py" holder.py "$1" "$host" <hold.fifo >holder.out 2>&1 &
  holder=$!
  exec 3>hold.fifo
  until grep -q locked holder.out 2>/dev/null; do
    kill -0 "$holder" 2>/dev/null || { cat holder.out; fail "the lock holder died"; return 1; }
    sleep 0.05
  done
}
release() { exec 3>&-; wait "$holder"; }

hold run/.meshtrain.lock
snapshot run >before.txt
for np in 1 2; do
  train "held_np$np.log" "$np" --output.dir=run --train.steps=6 --checkpoint.every=2
  expect_refused "held_np$np.log" $? run output.dir "$holder"
done
snapshot run >after.txt
diff before.txt after.txt || fail "a refused run changed the locked directory"
release

# ---- 2. a shared checkpoint.dir -------------------------------------------------------
mkdir -p shared_ck
hold shared_ck/.meshtrain.lock
snapshot shared_ck >before.txt
train shared.log 2 --output.dir=fresh/out --checkpoint.dir=shared_ck --train.steps=2
expect_refused shared.log $? shared_ck checkpoint.dir "$holder"
snapshot shared_ck >after.txt
diff before.txt after.txt || fail "a refused run changed the locked checkpoint.dir"
[[ ! -e fresh ]] || { find fresh; fail "a refused run left the output.dir it created"; }
release

# ---- 3. stale lock files --------------------------------------------------------------
[[ -s shared_ck/.meshtrain.lock ]] || fail "the holder's lock file should still be there (stale)"
train stale.log 1 --output.dir=stale_out --checkpoint.dir=shared_ck --train.steps=2 ||
  { cat stale.log; fail "a stale lock file (its holder gone) blocked a run"; }
[[ ! -e shared_ck/.meshtrain.lock && ! -e stale_out/.meshtrain.lock ]] || fail "the run left its lock files"
MESHTRAIN_FAULT=metrics.write:step=3 train killed.log 1 --output.dir=killed --train.steps=5 --checkpoint.every=2
grep -q 'fires: kill at metrics.write' killed.log || { cat killed.log; fail "the kill fault did not fire"; }
[[ -e killed/.meshtrain.lock ]] || fail "a killed run should leave its lock file (the lock itself died with it)"
train resumed.log 1 --output.dir=killed --train.steps=5 --checkpoint.every=2 ||
  { cat resumed.log; fail "a killed run's lock file blocked its resume"; }
grep -q 'resumed from killed/checkpoints/step_00000002.h5' resumed.log || { cat resumed.log; fail "no resume"; }

# ---- 4. two real runs -----------------------------------------------------------------
# shellcheck disable=SC2086  # MPIEXEC is a command with flags
MESHTRAIN_FAULT=metrics.write:step=3:action=stop $MPIEXEC -n 1 "$MESHTRAIN_BIN" train "$tiny" "${common[@]}" \
  --output.dir=live --train.steps=6 --checkpoint.every=2 --parallel.collective_timeout=0 >live.log 2>&1 &
live=$!
until grep -q 'fires: stop at metrics.write' live.log 2>/dev/null; do
  kill -0 "$live" 2>/dev/null || { cat live.log; fail "run A ended before its stop"; break; }
  sleep 0.05
done
pid=$(sed -n 's/^host .* pid \([0-9]*\)$/\1/p' live/.meshtrain.lock)
[[ -n $pid ]] || fail "run A's lock file names no pid: $(cat live/.meshtrain.lock)"
# Frozen: the kernel says "T" (stopped); A writes nothing until SIGCONT.
until [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == T ]]; do
  kill -0 "$pid" 2>/dev/null || { fail "run A's rank $pid is gone"; break; }
  sleep 0.05
done
snapshot live >before.txt
train second.log 2 --output.dir=live --train.steps=6 --checkpoint.every=2
expect_refused second.log $? live output.dir "$pid"
# Run A's default checkpoint.dir (inside its output.dir) named by a run with another
# output.dir: locked on its own, so refused too.
train third.log 1 --output.dir=third_out --checkpoint.dir=live/checkpoints --train.steps=6 --checkpoint.every=2
expect_refused third.log $? live/checkpoints checkpoint.dir "$pid"
[[ ! -e third_out ]] || fail "the refused third run left the output.dir it created"
snapshot live >after.txt
diff before.txt after.txt || fail "the refused second run changed run A's directory"
kill -CONT "$pid"
wait_pid "$live" 120
status=$?
[[ $status == 0 ]] || { cat live.log; fail "run A exited $status after the refused run"; }
steps=$(jq -r '.step' live/metrics.jsonl | tr '\n' ' ')
[[ $steps == "1 2 3 4 5 6 " ]] || fail "run A's metrics.jsonl holds steps '$steps', expected every step 1..6 once"
[[ -f live/checkpoints/step_00000006.h5 && ! -e live/.meshtrain.lock ]] || fail "run A's final state is wrong"
finish "run lock: refused runs change nothing, stale locks do not block, the live run finishes whole"
