#!/usr/bin/env bash
# A host whose link is cut mid-run (`ip link set down` on its eth0; the host keeps running,
# unreachable): with parallel.collective_timeout=T,
#  - host 1's ranks abort through the collective watchdog, naming ranks 2 and 3 on host 2;
#  - host 2's ranks (their output kept on host 2 with --output-filename) abort the same way
#    naming ranks 0 and 1 on host 1;
#  - every meshtrain process on both hosts has ended within T plus a grace;
#  - mpirun ends, non-zero, once it notices the lost daemon. It learns of it from TCP:
#    keepalive while its connection to the daemon is idle (Open MPI's oob_tcp_keepalive_*,
#    300 s by default, seconds here), and retransmission timeouts once it has sent the
#    daemon something (the kill order after the abort), which Linux gives up on only after
#    net.ipv4.tcp_retries2 retries (15 by default: ~15 minutes). Host 1, where mpirun runs,
#    gets tcp_retries2=4 (~6 s); doc/running.md says the same for real clusters.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
source "$MESHTRAIN_SOURCE_DIR/tests/multihost/mh_lib.sh"
cluster_up 2 || { fail "cannot build the cluster"; finish; }

T=5
grace=$((8 * time_scale))  # abort and process exit on a loaded 2-core machine
keepalive=(--mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3)
h1=${CLUSTER_HOSTS[0]} h2=${CLUSTER_HOSTS[1]}
ip netns exec "$h1" sysctl -qw net.ipv4.tcp_retries2=4 || fail "cannot set tcp_retries2 in $h1"

# meshtrain processes still running inside host I's namespace.
alive_on() { ip netns pids "${CLUSTER_HOSTS[$1 - 1]}" 2>/dev/null | xargs -r ps -o comm= -p 2>/dev/null | grep -c '^meshtrain$'; }

cluster_mpirun 2 "${keepalive[@]}" --output-filename "$TEST_TMP/ranks" -- "$MESHTRAIN_BIN" "${train_args[@]}" \
  --train.steps=100000 --checkpoint.every=0 --checkpoint.save_final=false --parallel.strategy=full_shard \
  --parallel.dp_shard=4 --parallel.collective_timeout=$T --output.dir=run >run.log 2>&1 &
launcher=$!
wait_for_step run/metrics.jsonl 3 60 "$launcher" || { cat run.log; fail "no progress before the cut"; finish; }
[[ $(alive_on 1) == 2 && $(alive_on 2) == 2 ]] || fail "expected 2 ranks on each host before the cut"
t0=$SECONDS
cluster_cut 2
echo "cut $h2's link at step $(last_step run/metrics.jsonl)"
ended=""
while ((SECONDS - t0 <= T + grace + 30)); do
  if [[ -z $ended ]] && (($(alive_on 1) + $(alive_on 2) == 0)); then ended=$((SECONDS - t0)); fi
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.2
done
[[ -z $ended ]] && (($(alive_on 1) + $(alive_on 2) == 0)) && ended=$((SECONDS - t0))
wait_pid "$launcher" 1
status=$?
echo "meshtrain processes ended ${ended:-never} s after the cut; mpirun exit status $status after $((SECONDS - t0)) s"
[[ -n $ended ]] || fail "meshtrain processes still running $((SECONDS - t0)) s after the cut"
[[ -n $ended ]] && ((ended > T + grace)) && fail "the processes took $ended s to end, more than collective_timeout + $grace s"
[[ $status -ne 124 ]] || fail "mpirun hung after the cut"
[[ $status -ne 0 ]] || fail "mpirun exited 0"

# Host 1 (stderr reaches mpirun): ranks 0 and 1 name ranks 2 and 3 on host 2.
grep "collective watchdog" run.log | head -n 2
grep -Eq "rank [01] \($h1\): aborting the job: collective watchdog: .* within parallel.collective_timeout=$T s: .*on other nodes \(not inspectable[^)]*\): rank\(s\) 2, 3 on $h2" run.log ||
  fail "host 1's watchdog message does not name ranks 2, 3 on $h2"
# Host 2 (its output cannot reach mpirun; Open MPI's daemon there kept it in files).
h2_out=$(cat "$TEST_TMP"/ranks/*/rank.[23]/stderr 2>/dev/null)
grep "collective watchdog" <<<"$h2_out" | head -n 2
grep -Eq "rank [23] \($h2\): aborting the job: collective watchdog: .*rank\(s\) 0, 1 on $h1" <<<"$h2_out" ||
  fail "host 2's ranks did not report ranks 0, 1 on $h1 (rank files under $TEST_TMP/ranks)"
finish "a cut link ends every process within collective_timeout + $grace s, the watchdog naming the unreachable ranks"
