# shellcheck shell=bash
# A host lost mid-run, recovered by scripts/meshtrain-supervise on the survivors (issue 31),
# on a 3-host namespace cluster (one rank per host, full_shard over all of them, the mesh
# left to meshtrain). Sourced by recover_kill.sh (every process of host 3 killed) and
# recover_cut.sh (host 3's link cut); `recover_case kill|cut` runs one case:
#  1. the supervisor runs mpirun from host 1 with a host file of the 3 hosts;
#  2. after the step-10 checkpoint (checkpoint.every=5), host 3 is lost;
#  3. the supervisor finds it lost -- its probe, a TCP connection to each host's stand-in for
#     sshd (a listener every host runs, like any node's sshd, killed with the host's other
#     processes), is not accepted -- and relaunches on hosts 1 and 2 from the newest
#     complete checkpoint; the run finishes (status 0);
#  4. must-show 1: the losses and gradient norms from the resume step on are bitwise those of
#     a run started by hand from the same checkpoint on hosts 1 and 2 (2 ranks, the mesh
#     meshtrain picks); final step and tokens seen as configured; summary.json lists the
#     recovery; every committed checkpoint loads and validates (`meshtrain eval` on it);
#  5. must-show 2: the supervisor's log line gives the time from the last step before the
#     loss to the first step on the survivors (printed; no time is asserted).
# parallel.collective_timeout=5: the survivors' watchdog gives up 5 s after host 3 stops
# answering (a cut link; doc/batch.md says how to choose it). Every wait is bounded.
# shellcheck source=tests/multihost/mh_lib.sh
source "$MESHTRAIN_SOURCE_DIR/tests/multihost/mh_lib.sh"

supervise=$MESHTRAIN_SOURCE_DIR/scripts/meshtrain-supervise
steps=30 gb=12 seq=32 T=5

# launcher_flags: what cluster_mpirun gives mpirun (the launch agent, the cluster's subnet,
# TCP keepalive so that mpirun notices a lost daemon in seconds, as in cut_link.sh).
launcher_flags() {
  local f
  for f in --allow-run-as-root --bind-to none --mca plm_rsh_agent "$CLUSTER_DIR/agent" \
           --mca btl_tcp_if_include "$CLUSTER_SUBNET_PREFIX.0/24" --mca oob_tcp_if_include "$CLUSTER_SUBNET_PREFIX.0/24" \
           --mca mpi_yield_when_idle 1 --mca btl tcp,self,vader --mca oob_tcp_keepalive_time 2 \
           --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 -x MESHTRAIN_TEST_TAG; do
    printf -- '--launcher-arg\n%s\n' "$f"
  done
}

recover_case() {
  local how=$1
  cluster_up 3 || { fail "cannot build the cluster"; finish; }
  local h1=${CLUSTER_HOSTS[0]} h2=${CLUSTER_HOSTS[1]} h3=${CLUSTER_HOSTS[2]}
  # Host 1 runs mpirun: it gives up on an unreachable daemon after ~6 s, not ~15 min.
  ip netns exec "$h1" sysctl -qw net.ipv4.tcp_retries2=4 || fail "cannot set tcp_retries2 in $h1"
  printf '%s slots=1\n' "$h1" "$h2" "$h3" >hosts
  # Each host's "sshd": a listener on port 2222 inside its namespace. A host answers when
  # it accepts a connection there: not when its processes are dead (refused) or its link
  # is cut (no answer within 3 s).
  local i
  for i in 1 2 3; do
    ip netns exec "${CLUSTER_HOSTS[i - 1]}" "$py" -c '
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 2222))
s.listen(16)
while True:
    s.accept()[0].close()' >/dev/null 2>&1 &
  done
  cat >probe <<PY
#!$py
import socket, sys
s = socket.socket()
s.settimeout(3)
try:
    s.connect((sys.argv[1], 2222))
except OSError:
    sys.exit(1)
PY
  chmod +x probe
  local tries=0
  for i in 1 2 3; do
    until cluster_exec 1 "$TEST_TMP/probe" "${CLUSTER_HOSTS[i - 1]}"; do
      ((++tries < 50)) || { fail "host $i's listener did not come up"; finish; }
      sleep 0.1
    done
  done
  local run=$TEST_TMP/run
  local common=("$MESHTRAIN_BIN" train "$tiny" --data.dir=random --train.eval_every=0 --train.global_batch="$gb" --train.steps="$steps"
                --train.log_every=1 --checkpoint.every=5 --checkpoint.keep=100 --checkpoint.save_final=true
                --parallel.collective_timeout="$T" --parallel.strategy=no_shard)
  # parallel.strategy given: both sides of the bitwise comparison would otherwise resolve
  # `auto` on their own start-up measurement (doc/training.md).
  local flags
  mapfile -t flags < <(launcher_flags)
  echo "--- 1. supervised run on 3 hosts"
  cluster_exec 1 env MESHTRAIN_SUPERVISE_PROBE_TIMEOUT=5 "$supervise" --hostfile "$TEST_TMP/hosts" \
    --probe "$TEST_TMP/probe" "${flags[@]}" -- "${common[@]}" --output.dir="$run" >supervise.log 2>&1 &
  local sup=$!
  if ! wait_for_step "$run/metrics.jsonl" 12 120 "$sup"; then
    cat supervise.log; fail "the run did not reach step 12"; finish
  fi
  [[ $(nodes_in_log supervise.log) == 3 ]] || fail "meshtrain did not start on 3 nodes"
  local at
  at=$(last_step "$run/metrics.jsonl")
  echo "--- 2. losing $h3 ($how) at step $at, $(date -u +%H:%M:%S.%N | cut -c1-12) UTC"
  if [[ $how == kill ]]; then
    local pids
    pids=$(ip netns pids "$h3")
    # shellcheck disable=SC2086  # one pid per word
    [[ -n $pids ]] && kill -9 $pids
  else
    cluster_cut 3
  fi
  wait_pid "$sup" 200
  local status=$?
  echo "--- 3. the supervisor's log"
  grep "^\[meshtrain-supervise" supervise.log
  [[ $status == 0 ]] || { tail -n 40 supervise.log; fail "the supervised run ended with status $status, expected 0"; }
  grep -q "recovery 1 of at most 3: lost \[$h3\]" supervise.log || fail "no recovery line naming $h3"
  grep -q "launch 2 on 2 host(s) \[$h1,$h2\], 2 rank(s)" supervise.log || fail "no relaunch on $h1 and $h2"
  grep -q "meshtrain train: .* 2 rank(s) on 2 node(s)" supervise.log || fail "the relaunch did not run on 2 nodes"
  grep -q "$h3 does not answer" supervise.log || fail "the probe did not find $h3 lost"
  local resume
  resume=$(sed -n 's/.*"resume_step": \([0-9]*\).*/\1/p' "$run/recoveries.jsonl" | head -n1)
  echo "resumed at step ${resume:-?}"
  # The newest complete checkpoint: step 10, or 15 when that save completed before the loss
  # stopped the run (its metrics record may then be missing: the record is written after
  # the save, and its agreement needs every rank).
  ((${resume:-0} >= 10 && ${resume:-0} <= at + 5 && ${resume:-0} % 5 == 0)) ||
    fail "resume step '${resume:-}', expected a checkpoint step in 10..$((at + 5))"
  grep -q "resumed from $run/checkpoints/$(printf 'step_%08d.h5' "${resume:-0}"): step ${resume:-?}" supervise.log ||
    fail "meshtrain did not resume from the newest complete checkpoint"

  echo "--- 4. by hand: the same checkpoint on $h1 and $h2 (2 ranks)"
  local ckpt
  ckpt=$run/checkpoints/$(printf 'step_%08d.h5' "${resume:-0}")
  local all=("${CLUSTER_HOSTS[@]}")
  CLUSTER_HOSTS=("$h1" "$h2")
  cluster_mpirun 1 -- "${common[@]}" --output.dir="$TEST_TMP/byhand" --checkpoint.resume="$ckpt" >byhand.log 2>&1 ||
    { tail -n 30 byhand.log; fail "the run by hand failed"; }
  CLUSTER_HOSTS=("${all[@]}")
  "$py" "$MESHTRAIN_SOURCE_DIR/tests/parallel/compare_metrics.py" byhand/metrics.jsonl "$run/metrics.jsonl" --exact \
    --keys loss grad_norm --steps "$((resume + 1)),$steps" --label "recovered vs by hand from step $resume" ||
    fail "the recovered run's losses differ from the run by hand"
  "$py" - "$run" "$steps" $((steps * gb * seq)) "$h3" "$resume" <<'PY' || fail "the recovered run's record is wrong"
import json, sys
run, steps, tokens, lost, resume = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
recs = [json.loads(l) for l in open(run + "/metrics.jsonl")]
got = [r["step"] for r in recs]
want = [s for s in range(1, steps + 1) if s != resume]
assert got in (want, list(range(1, steps + 1))), "metrics.jsonl steps %s, expected 1..%d once" % (got, steps)
assert recs[-1]["tokens"] == tokens, "tokens seen %r, expected %r" % (recs[-1]["tokens"], tokens)
s = json.load(open(run + "/summary.json"))
rec = s["recoveries"]
assert len(rec) == 1 and rec[0]["lost_hosts"] == [lost] and rec[0]["hosts_after"] == 2, rec
print("final step %d, tokens %d; summary.json recoveries: %s" % (recs[-1]["step"], recs[-1]["tokens"], rec))
PY
  echo "--- 5. every committed checkpoint loads and validates"
  local f n=0
  for f in "$run"/checkpoints/step_*.h5; do
    "$MESHTRAIN_BIN" eval "$run/config.ini" --checkpoint "$f" --batches 1 >eval.log 2>&1 ||
      { cat eval.log; fail "$f does not load"; }
    n=$((n + 1))
  done
  ((n == steps / 5)) || fail "$n checkpoints, expected $((steps / 5))"
  # A save the lost host interrupted may have left a .tmp: never committed, never loaded.
  grep -q "^step_0*$steps.h5$" "$run/checkpoints/latest" || fail "latest does not name the step-$steps checkpoint"
  grep -o "recovery 1 of at most 3: .*" supervise.log
}
