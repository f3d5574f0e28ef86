#!/usr/bin/env bash
# A rank that dies or stalls does not leave the job hanging (issue 7, "Must show" 4), with
# parallel.collective_timeout=T:
#  1. kill -9 of rank 1 mid-run: the job exits non-zero within T plus a few seconds, with a
#     message (Open MPI's launcher notices the dead rank and ends the job; had it not, the
#     survivors' watchdog would after T).
#  2. SIGSTOP of rank 1 mid-run (the case no launcher notices: the process is alive): the
#     survivor's collective watchdog ends the job with status 76 (peers lost) within T plus a few
#     seconds, naming the collective and rank 1. Collectives at step boundaries (the stop
#     decision, metric reductions) are watched too, so the stall is caught wherever it hits.
#  3. Out of memory on rank 1 in step 1 (MESHTRAIN_FAULT=pool.allocate:action=enomem, the
#     pool's cache empty: nothing to return): the job ends with status 3 and one message from
#     rank 1 naming the request, the bytes in use by category and the settings that need less;
#  4. the same refusal in `eval` and `generate` (1 rank) names their own ways to need less (no
#     activation checkpointing; generate's --tokens), not training's.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

T=5
grace=$((10 * time_scale))  # launcher teardown and process exit on a loaded 2-core machine
args=(train "$tiny" --data.dir=random --train.steps=100000 --checkpoint.every=0 --checkpoint.save_final=false
      --parallel.collective_timeout="$T")

# run_case NAME SIGNAL: starts the run, sends SIGNAL to rank 1 once step 3 is logged, and
# sets $status (launcher exit) and $elapsed (seconds from the signal to the exit).
run_case() {
  local name=$1 sig=$2
  mpirun_bg 2 "$name.log" "${args[@]}" --output.dir="$name"
  wait_for_step "$name/metrics.jsonl" 3 120 "$launcher" || { cat "$name.log"; fail "$name: no progress"; return 1; }
  victim=$(rank_pid 1) || { fail "$name: rank 1 not found"; return 1; }
  local t0 at
  at=$(last_step "$name/metrics.jsonl")
  t0=$(date +%s.%N)
  kill "-$sig" "$victim"
  wait_pid "$launcher" $((T + 60))
  status=$?
  elapsed=$("$py" -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t0")
  # A stopped rank that survived the teardown is killed while still stopped (SIGKILL needs no
  # SIGCONT). Continuing it first would let its own watchdog fire at once and overwrite the
  # survivor's peers_lost.json with its view (rank 0 lost), which a loaded machine once showed.
  kill -9 "$victim" 2>/dev/null
  echo "$name: SIG$sig to rank 1 (pid $victim) at step $at -> exit status $status after $elapsed s" \
       "(collective_timeout=$T s)"
  [[ $status -ne 124 ]] || fail "$name: the job hung (killed after $((T + 60)) s)"
  [[ $status -ne 0 ]] || fail "$name: the job exited 0"
  "$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$elapsed" $((T + grace)) ||
    fail "$name: took $elapsed s, more than collective_timeout + $grace s"
}

echo "--- 1. kill -9 of rank 1"
if run_case killed KILL; then
  grep -E "exited on signal 9|collective watchdog" killed.log || fail "killed: no message about the dead rank"
fi

echo "--- 2. SIGSTOP of rank 1"
if run_case stalled STOP; then
  grep "collective watchdog" stalled.log
  [[ $status -eq 76 ]] || fail "stalled: exit status $status, expected 76 (peers lost: the watchdog)"
  # The survivor's record for a supervisor: rank 1 lost, on this host (node-local, so certain).
  "$py" - stalled/peers_lost.json "$(hostname)" <<'PY' || fail "stalled: peers_lost.json does not name rank 1 on this host"
import json, sys
r = json.load(open(sys.argv[1]))
print("peers_lost.json:", {k: r[k] for k in ("reported_by", "lost", "lost_hosts", "newest_checkpoint", "exit_status")})
sys.exit(0 if [x["rank"] for x in r["lost"]] == [1] and r["lost_hosts"] == [sys.argv[2]] and r["exit_status"] == 76
         and r["reported_by"]["rank"] == 0 else 1)
PY
  grep -Eq "aborting the job: collective watchdog: [a-z_]+ #[0-9]+ on the '[a-z_]+' group did not complete within parallel.collective_timeout=$T s: rank\(s\) 1[ ,;]" stalled.log ||
    fail "stalled: no watchdog message naming the collective and rank 1"
fi

echo "--- 3. an allocation refused on rank 1 in step 1"
# shellcheck disable=SC2086  # MPIEXEC is a command with flags
MESHTRAIN_FAULT=pool.allocate:rank=1:step=1:action=enomem timeout $((T + 60)) $MPIEXEC -n 2 "$MESHTRAIN_BIN" \
  "${args[@]}" --output.dir=oom >oom.log 2>&1
status=$?
grep "out of host memory" oom.log
[[ $status -eq 3 ]] || { tail -20 oom.log; fail "oom: exit status $status, expected 3 (the job aborted)"; }
grep -Eq "^\[meshtrain\] rank 1 \(.*\): aborting the job: \`meshtrain train\`: out of host memory: a block of [0-9.]+ [KMG]?i?B \([a-z_]+\) could not be allocated \(std::bad_alloc\); in use [0-9.]+ [KMG]?i?B \(params .*\).*\. To need less: a smaller train.micro_batch \(this run: 2\), train.activation_checkpointing=true,? .*more ranks; \`meshtrain plan\` shows what each choice needs$" oom.log ||
  fail "oom: no message from rank 1 naming the request, the memory in use and what this run can change to need less"
[[ ! -e oom/metrics.jsonl ]] || [[ ! -s oom/metrics.jsonl ]] || fail "oom: a step was logged after the failed allocation"

echo "--- 4. eval and generate out of memory: their own ways to need less"
# A checkpoint to load: 2 steps on 1 rank.
timeout $((120 * time_scale)) "$MESHTRAIN_BIN" train "$tiny" --data.dir=random --train.steps=2 --output.dir=small \
  >small.log 2>&1 || { tail -20 small.log; fail "the run for eval/generate"; }
for cmd in eval generate; do
  extra=(--data.dir=random)
  [[ $cmd == generate ]] && extra=(--prompt hi --tokens 7)
  MESHTRAIN_FAULT=pool.allocate:action=enomem timeout $((60 * time_scale)) "$MESHTRAIN_BIN" $cmd "$tiny" \
    --checkpoint small/checkpoints "${extra[@]}" >"oom_$cmd.log" 2>&1
  status=$?
  [[ $status -eq 3 ]] || { tail -20 "oom_$cmd.log"; fail "oom $cmd: exit status $status, expected 3"; }
  grep "To need less" "oom_$cmd.log"
  if [[ $cmd == eval ]]; then want="To need less: a smaller train.micro_batch (this run: 2) or more ranks;"
  else want="To need less: fewer --tokens (this run: 7; the KV cache holds the prompt and them) or more ranks;"; fi
  grep -qF "aborting the job: \`meshtrain $cmd\`: out of host memory" "oom_$cmd.log" && grep -qF "$want" "oom_$cmd.log" ||
    fail "oom $cmd: the message does not end with: $want"
done
finish "dead, stalled and out-of-memory ranks end the job within collective_timeout + $grace s, with a message"
