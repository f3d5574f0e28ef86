#!/usr/bin/env bash
# A preemption signal during `train`'s start-up (doc/batch.md, "Preemption and time limits"):
# the handlers are installed before the start-up's slow part (dataset checks, checkpoint
# load, measurements), so SIGUSR1 or SIGTERM to one rank then ends in status 75 on every
# rank -- the status the jobscripts requeue -- instead of killing that rank by the default
# action (mpirun 138 or 143, a run stopped for good). No step is trained and nothing is
# saved; the requeued run starts, or resumes, as if the signal had not come.
#
# Deterministic, without sleeps: MESHTRAIN_FAULT=train.startup:rank=R:action=stop freezes
# rank R (SIGSTOP) inside the start-up, after the checkpoint is resumed (or the weights are
# initialised) and before the run writes; the test waits until /proc says it is stopped,
# sends the signal (pending while it is stopped) and SIGCONT.
#  1. a fresh run, SIGUSR1 to rank 1: exit 75 on both ranks, "stopping before step 1", no
#     checkpoint and no step in metrics.jsonl; the requeued run trains to the end;
#  2. a resumed run, SIGTERM to rank 0: exit 75, "stopping before step 5", the checkpoints
#     and metrics.jsonl as they were; the requeued run resumes from step 4 to the end.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

args=(train "$tiny" --data.dir=random --parallel.strategy=no_shard --train.eval_every=0 --checkpoint.every=2
  --output.dir=run)

# Records each rank's exit status in exit.<rank> (as in preempt_one_rank.sh, whose comment
# says why it traps SIGTERM).
cat >rank_status.sh <<'EOF'
#!/usr/bin/env bash
trap 'true' TERM
"$@"
status=$?
echo "$status" >"exit.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}"
exit "$status"
EOF
chmod +x rank_status.sh

# signal_at_startup LOG RANK SIGNAL ARGS...: `meshtrain ARGS` on 2 ranks with rank RANK
# frozen at train.startup; SIGNAL goes to it while it is frozen, then SIGCONT. Sets $status
# (mpirun's exit status).
signal_at_startup() {
  local log=$1 rank=$2 sig=$3 pid="" state="" end
  shift 3
  rm -f exit.0 exit.1
  # shellcheck disable=SC2086
  MESHTRAIN_FAULT=train.startup:rank=$rank:action=stop $MPIEXEC -n 2 ./rank_status.sh "$MESHTRAIN_BIN" "$@" \
    >"$log" 2>&1 &
  launcher=$!
  end=$((SECONDS + 60 * time_scale))
  while ((SECONDS < end)) && kill -0 "$launcher" 2>/dev/null; do
    pid=$(rank_pid "$rank") && state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    [[ $state == T ]] && break
    sleep 0.05
  done
  if [[ $state != T ]]; then
    cat "$log"
    fail "$log: rank $rank did not stop at train.startup"
    kill -9 "$launcher" 2>/dev/null
    finish
  fi
  kill "-$sig" "$pid"
  kill -CONT "$pid"
  echo "$log: SIG$sig to rank $rank (pid $pid) while it was held at train.startup"
  wait_pid "$launcher" 120
  status=$?
  echo "$log: mpirun exit status $status"
}

# expect_preempted LOG STEP: exit 75 on both ranks, one announcement of stopping before STEP.
expect_preempted() {
  local log=$1 step=$2
  [[ $status -eq 75 ]] || { tail -20 "$log"; fail "$log: mpirun exited with $status, expected 75"; }
  for r in 0 1; do
    [[ $(cat "exit.$r" 2>/dev/null) == 75 ]] || fail "$log: rank $r exited with '$(cat "exit.$r" 2>/dev/null)', expected 75"
  done
  [[ $(grep -c "stopping before step $step (SIGUSR1/SIGTERM received during start-up)" "$log") -eq 1 ]] ||
    fail "$log: expected one 'stopping before step $step (SIGUSR1/SIGTERM received during start-up)' line"
  grep -q "stopping after step" "$log" && fail "$log: a step was trained after the signal"
}

echo "--- 1. fresh run, SIGUSR1 to rank 1 during start-up"
signal_at_startup fresh.log 1 USR1 "${args[@]}" --train.steps=4
expect_preempted fresh.log 1
grep -q "no checkpoint yet" fresh.log || fail "fresh.log: the stop does not say there is no checkpoint yet"
[[ -z $(ls run/checkpoints 2>/dev/null) ]] || fail "a checkpoint was written: $(ls run/checkpoints)"
[[ $(last_step run/metrics.jsonl) == 0 ]] || fail "metrics.jsonl holds a step"

echo "--- the requeued run (checkpoint.resume=auto) trains from the start"
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --train.steps=4 >requeued1.log 2>&1 ||
  { tail -20 requeued1.log; fail "the requeued fresh run failed"; }
[[ $(last_step run/metrics.jsonl) == 4 ]] || fail "the requeued fresh run did not reach step 4"
[[ $(cat run/checkpoints/latest 2>/dev/null) == step_00000004.h5 ]] || fail "latest is not step_00000004.h5"

echo "--- 2. resumed run (train.steps 4 -> 6), SIGTERM to rank 0 during start-up"
before=$(ls run/checkpoints | sort | tr '\n' ' ')
metrics_before=$(md5sum <run/metrics.jsonl)
signal_at_startup resumed.log 0 TERM "${args[@]}" --train.steps=6
expect_preempted resumed.log 5
grep -q "resumed from run/checkpoints/step_00000004.h5: step 4" resumed.log || fail "resumed.log: did not resume from step 4"
grep -q "the run resumes from run/checkpoints/step_00000004.h5 again" resumed.log ||
  fail "resumed.log: the stop does not name the checkpoint the run resumes from"
[[ $(ls run/checkpoints | sort | tr '\n' ' ') == "$before" ]] || fail "the checkpoints changed: $(ls run/checkpoints)"
[[ $(md5sum <run/metrics.jsonl) == "$metrics_before" ]] || fail "metrics.jsonl changed"

echo "--- the requeued run resumes from step 4"
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --train.steps=6 >requeued2.log 2>&1 ||
  { tail -20 requeued2.log; fail "the requeued resumed run failed"; }
grep -q "resumed from run/checkpoints/step_00000004.h5: step 4" requeued2.log || fail "the requeued run did not resume from step 4"
[[ $(last_step run/metrics.jsonl) == 6 ]] || fail "the requeued run did not reach step 6"
finish "a signal during start-up: exit 75 on every rank, nothing trained or saved; the requeued runs start and resume"
