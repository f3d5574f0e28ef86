#!/usr/bin/env bash
# A second signal while the preemption save is being written does not corrupt it (issue 7,
# "Preemption"): SIGUSR1 to rank 0 starts the save; while its step_*.h5.tmp exists, SIGUSR1
# goes to both ranks again and SIGTERM to rank 1. The handlers only set a flag, so the
# save completes: exit 75, `latest` names a complete checkpoint (h5py reads every tensor,
# all finite, no .tmp left), and a run with checkpoint.resume=auto continues from it to the
# end. The model is widened (~38 MB checkpoints) so that a save lasts long enough to be
# caught in flight; if the save wins the race, the script tries again.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

steps=20
args=(train "$tiny" --model.d_model=256 --model.n_layers=4 --train.steps="$steps" --train.eval_every=0 --data.dir=random
      --checkpoint.every=0 --checkpoint.save_final=true --parallel.dp_shard=2 --parallel.strategy=full_shard)

caught=0
for attempt in 1 2 3; do
  rm -rf run
  mpirun_bg 2 "preempted_$attempt.log" "${args[@]}" --output.dir=run
  wait_for_step run/metrics.jsonl 2 120 "$launcher" || { cat "preempted_$attempt.log"; fail "no progress"; finish; }
  r0=$(rank_pid 0) && r1=$(rank_pid 1) || { fail "ranks not found"; finish; }
  kill -USR1 "$r0"
  tmp=""
  for _ in $(seq 1 3000); do  # up to 30 s for the save to start
    tmp=$(ls run/checkpoints/step_*.h5.tmp 2>/dev/null | head -n1)
    [[ -n $tmp ]] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.01
  done
  if [[ -n $tmp ]]; then
    kill -USR1 "$r0" "$r1" 2>/dev/null
    kill -TERM "$r1" 2>/dev/null
    in_flight=0
    [[ -e $tmp ]] && in_flight=1  # still being written after the second signals were sent
  fi
  wait_pid "$launcher" 120
  status=$?
  if [[ -z $tmp || $in_flight -eq 0 ]]; then
    echo "attempt $attempt: the save finished before the second signal (exit $status); trying again"
    continue
  fi
  echo "attempt $attempt: second SIGUSR1 (both ranks) + SIGTERM (rank 1) while $tmp was written; exit $status"
  caught=1
  break
done
((caught)) || { fail "could not signal during a save in 3 attempts"; finish; }

[[ $status -eq 75 ]] || { tail -20 "preempted_$attempt.log"; fail "exit status $status, expected 75"; }
[[ $(grep -c "stopping after step" "preempted_$attempt.log") -eq 1 ]] || fail "expected exactly one stop announcement"
latest=$(cat run/checkpoints/latest 2>/dev/null)
saved=${tmp%.tmp}
[[ $latest == "$(basename "$saved")" ]] || fail "latest is '$latest', expected $(basename "$saved")"
ls run/checkpoints/*.tmp 2>/dev/null && fail "a temporary checkpoint file was left behind"
all_finite "run/checkpoints/$latest" || fail "$latest is unreadable or holds non-finite values"
step=$((10#$(basename "$saved" .h5 | cut -d_ -f2)))

# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --output.dir=run >resumed.log 2>&1 || { tail -30 resumed.log; fail "the resumed run failed"; }
grep -q "resumed from run/checkpoints/$latest: step $step" resumed.log || fail "the run did not resume from $latest"
[[ $(last_step run/metrics.jsonl) == "$steps" ]] || fail "the resumed run did not reach step $steps"
finish "signals during the save of step $step: checkpoint complete and loadable; resumed to step $steps"
