#!/usr/bin/env bash
# train.time_limit (issue 7, "Preemption"): with a limit of L seconds and a margin of M, the
# ranks stop on their own -- no signal -- once less than M seconds plus one step are left,
# save the same step, and exit 75 before the limit; the run then resumes like after a
# preemption. (The Slurm end time feeds the same deadline: slurm_preempt.sh checks that
# meshtrain reads it.)
#  2. the limit counts from the process's start, not the training loop's: a start-up that
#     takes longer than the limit (rank 1 held inside it by
#     MESHTRAIN_FAULT=train.startup:rank=1:action=stop for L2 + 1 seconds after the test saw
#     it stopped, so longer than that since its process started) leaves the run one step: it
#     trains step 1, saves it and exits 75, saying so at start-up. (No timing race: the hold
#     is longer than the whole limit; before the fix the deadline started after the hold and
#     the run trained to the end.)
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

# L counts the start-up too (several seconds for 2 ranks on a busy machine): long enough that
# the stop comes mid-run, after many steps.
L=$((20 * time_scale)) M=3
args=(train "$tiny" --data.dir=random --checkpoint.every=0 --train.log_every=10 --train.time_limit_margin="$M")
start=$SECONDS
# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --train.steps=100000 --train.time_limit=$L --output.dir=run \
  >limited.log 2>&1
status=$?
elapsed=$((SECONDS - start))
grep -E "wall-clock limit|stopping after" limited.log
echo "exit status $status after $elapsed s (time_limit=$L s, margin $M s; includes start-up)"
[[ $status -eq 75 ]] || { tail -20 limited.log; fail "exit status $status, expected 75"; }
grep -q "wall-clock limit from train.time_limit=${L}s" limited.log || fail "the limit was not announced"
stopped=$(sed -n 's/.*stopping after step \([0-9]*\) (wall-clock limit ahead).*/\1/p' limited.log | head -n1)
[[ -n $stopped ]] || fail "no 'stopping after step N (wall-clock limit ahead)'"
ckpt=$(printf 'step_%08d.h5' "${stopped:-0}")
[[ $(cat run/checkpoints/latest 2>/dev/null) == "$ckpt" ]] || fail "latest is not $ckpt"
# The limit counts from the process's start (before MPI_Init); mpirun's own start comes on top.
((elapsed < L + 15 * time_scale)) || fail "stopped after $elapsed s, long after the $L s limit"

# shellcheck disable=SC2086
timeout $((120 * time_scale)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --train.steps=$((stopped + 20)) --train.time_limit=0 \
  --output.dir=run >resumed.log 2>&1 || { tail -20 resumed.log; fail "the resumed run failed"; }
grep -q "resumed from run/checkpoints/$ckpt: step $stopped" resumed.log || fail "the run did not resume from $ckpt"

echo "--- 2. a start-up longer than train.time_limit: step 1 trained and saved, exit 75"
L2=6
# shellcheck disable=SC2086
MESHTRAIN_FAULT=train.startup:rank=1:action=stop $MPIEXEC -n 2 "$MESHTRAIN_BIN" "${args[@]}" --train.steps=4 \
  --train.time_limit=$L2 --output.dir=startup >startup.log 2>&1 &
launcher=$!
pid="" state=""
end=$((SECONDS + 60 * time_scale))
while ((SECONDS < end)) && kill -0 "$launcher" 2>/dev/null; do
  pid=$(rank_pid 1) && state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
  [[ $state == T ]] && break
  sleep 0.05
done
if [[ $state != T ]]; then
  cat startup.log
  kill -9 "$launcher" 2>/dev/null
  fail "rank 1 did not stop at train.startup"
  finish
fi
sleep $((L2 + 1))
kill -CONT "$pid"
wait_pid "$launcher" 120
status=$?
grep -E "wall-clock limit|start-up took|stopping after" startup.log
[[ $status -eq 75 ]] || { tail -20 startup.log; fail "startup.log: exit status $status, expected 75"; }
grep -q "wall-clock limit from train.time_limit=${L2}s: 0 s left (the start-up took" startup.log ||
  fail "startup.log: the start-up line does not count the start-up in the limit"
grep -q "warning: the start-up took [0-9]* s, and 0 s of the wall-clock limit are left, less than train.time_limit_margin=$M s: the run trains step 1, saves it" startup.log ||
  fail "startup.log: no warning that the start-up left less than the margin"
grep -q "stopping after step 1 (wall-clock limit ahead)" startup.log || fail "startup.log: did not stop after step 1"
[[ $(cat startup/checkpoints/latest 2>/dev/null) == step_00000001.h5 ]] || fail "startup: latest is not step_00000001.h5"
[[ $(last_step startup/metrics.jsonl) == 1 ]] || fail "startup: metrics.jsonl does not end at step 1"
finish "train.time_limit=$L s: saved step $stopped and exited 75 after $elapsed s; resumed; a start-up longer than $L2 s: step 1 saved, exit 75"
