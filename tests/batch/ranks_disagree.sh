#!/usr/bin/env bash
# Ranks that do not run the same run are refused at start-up (doc/running.md, "Every rank
# runs the same run"): exit 2 on every rank with one message, before a step is trained and
# without writing a run record. Pairs of ranks made different with mpirun's MPMD syntax
# (`-n 1 ... : -n 1 ...`, each part with its own working directory or arguments):
#  1. a relative output.dir (and so checkpoint.dir) with a different working directory per
#     rank: not the same directory on every rank. Without the check the first save's
#     collective file create hangs until parallel.collective_timeout and the job ends 76,
#     "peers lost", which the supervisor answers with a restart from scratch;
#  2. an absolute checkpoint.dir that is node-local on rank 1 (a private tmpfs mounted at the
#     same path in a mount namespace of its own, as on a second node; needs root and
#     unshare, otherwise said and left out);
#  3. train.lr given to rank 1 only: the message names the key and both values;
#  4. the same relative data.dir holding another corpus on rank 1 (a stale node-local copy):
#     the same configuration, different data;
# and a user error that only rank 1 raises, before any comparison can run: rank 1 gives up
# waiting for the others to raise it too (30 s) and ends the job with status 2, its error
# naming it (rank 0 waited in its next collective for ever; rank 1 had exited cleanly):
#  5. a key given twice on rank 1 only (a parse error only it sees);
#  6. a relative config file path that only rank 0's working directory holds (a per-node
#     copy of the configuration missing on one node);
# and the same 2-rank run with every rank alike still trains.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"

"$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes/computers --output data >/dev/null &&
  "$MESHTRAIN_BIN" prepare --input /usr/share/games/fortunes/literature --output data2 >/dev/null ||
  { fail "prepare failed"; finish; }
mkdir -p wd0 wd1 ns
ln -s ../data wd0/data
ln -s ../data2 wd1/data
# A bounded collective_timeout: without the checks, cases 1 and 2 end (76) instead of hanging.
args=(train "$tiny" --train.steps=4 --checkpoint.every=2 --train.eval_every=0 --parallel.collective_timeout=10)

# refused LOG PATTERN: exit 2, exactly one error line, matching PATTERN (grep -E), no step.
refused() {
  local log=$1 pattern=$2
  [[ $status -eq 2 ]] || { tail -20 "$log"; fail "$log: exit status $status, expected 2"; }
  [[ $(grep -c "error:" "$log") -eq 1 ]] || { cat "$log"; fail "$log: expected exactly one error line"; }
  grep -E "error: .*$pattern" "$log" || { cat "$log"; fail "$log: the error does not match '$pattern'"; }
  grep -q "^step " "$log" && fail "$log: a step was trained"
}

echo "--- 1. relative output.dir, a different working directory per rank"
mpmd wdir.log -wdir wd0 "$MESHTRAIN_BIN" "${args[@]}" --data.dir=random --output.dir=run -- \
  -wdir wd1 "$MESHTRAIN_BIN" "${args[@]}" --data.dir=random --output.dir=run
refused wdir.log "output.dir=run is not the same directory on every rank: rank 1 \(host [^,]*, where it resolves to $TEST_TMP/wd1/run\) does not see the file rank 0 .* (shared by all nodes|relative path)"
[[ -e wd0/run || -e wd1/run ]] && fail "the refused run left a directory: $(ls -d wd0/run wd1/run 2>/dev/null)"

echo "--- 2. checkpoint.dir node-local on rank 1"
cat >rank1_private.sh <<EOF
#!/usr/bin/env bash
# Rank 1 sees a private tmpfs at $TEST_TMP/ns, as a second node sees its own /scratch.
if [[ \${OMPI_COMM_WORLD_RANK:-0} == 1 ]]; then
  exec unshare -m --propagation private bash -c 'mount -t tmpfs none "$TEST_TMP/ns" && exec "\$@"' _ "\$@"
fi
exec "\$@"
EOF
chmod +x rank1_private.sh
if [[ $(id -u) == 0 ]] && unshare -m --propagation private bash -c "mount -t tmpfs none ns && umount ns" 2>/dev/null; then
  # shellcheck disable=SC2086
  timeout -k 5 $((90 * time_scale)) $MPIEXEC -n 2 ./rank1_private.sh "$MESHTRAIN_BIN" "${args[@]}" --data.dir=random \
    --output.dir=nsrun --checkpoint.dir="$TEST_TMP/ns/ck" >nodelocal.log 2>&1
  status=$?
  echo "nodelocal.log: exit status $status"
  refused nodelocal.log "checkpoint.dir=$TEST_TMP/ns/ck is not the same directory on every rank: rank 1 .* does not see .*No such file or directory"
  [[ -e ns/ck || -e nsrun ]] && fail "the refused run left a directory: $(ls -d ns/ck nsrun 2>/dev/null)"
else
  echo "case 2 left out: a private mount needs root and unshare here (case 1 checks the same start-up probe)"
fi

echo "--- 3. train.lr on rank 1 only"
mpmd lr.log "$MESHTRAIN_BIN" "${args[@]}" --data.dir=data --output.dir=lr -- \
  "$MESHTRAIN_BIN" "${args[@]}" --data.dir=data --output.dir=lr --train.lr=5e-2
refused lr.log "the ranks were not started with the same settings and data: train.lr is '0.05' on rank 1 \(host [^)]*\) but '0.001' on rank 0 .*\(rank 1 differs from rank 0\)"
[[ -e lr ]] && fail "the refused run left output.dir lr"

echo "--- 4. the same relative data.dir, another corpus on rank 1"
mpmd data.log -wdir wd0 "$MESHTRAIN_BIN" "${args[@]}" --data.dir=data --output.dir="$TEST_TMP/stale" -- \
  -wdir wd1 "$MESHTRAIN_BIN" "${args[@]}" --data.dir=data --output.dir="$TEST_TMP/stale"
refused data.log "data.dir contents is 'train.bin of [0-9]+ tokens .*' on rank 1 .* but 'train.bin of [0-9]+ tokens .*' on rank 0"

# only_rank1 LOG PATTERN: refused (exit 2, one error line, no step), the error rank 1's,
# naming it and PATTERN, ended by rank 1 since the others did not raise it.
only_rank1() {
  refused "$1" "rank 1 \(host [^)]*\): $2.* -- the other ranks did not stop with it within 30 s .*; ending the job"
}

# Cases 5 and 6 run at once: each waits out the 30 s that a rank alone with its error gives
# the others (app/cli.cpp), asleep, so together they take the time of one.
echo "--- 5. a key given twice on rank 1 only; 6. the config file missing on rank 1 only"
cp "$tiny" wd0/tiny.ini
(
  mpmd twice.log "$MESHTRAIN_BIN" "${args[@]}" --data.dir=random --output.dir="$TEST_TMP/twice" -- \
    "$MESHTRAIN_BIN" "${args[@]}" --data.dir=random --output.dir="$TEST_TMP/twice" --train.steps=3
  echo "$status" >twice.status
) &
(
  mpmd nocfg.log -wdir wd0 "$MESHTRAIN_BIN" train tiny.ini "${args[@]:2}" --data.dir=random \
    --output.dir="$TEST_TMP/nocfg" -- -wdir wd1 "$MESHTRAIN_BIN" train tiny.ini "${args[@]:2}" --data.dir=random \
    --output.dir="$TEST_TMP/nocfg"
  echo "$status" >nocfg.status
) &
wait
status=$(cat twice.status)
only_rank1 twice.log "config key 'train.steps' is given twice"
[[ -e twice ]] && fail "the refused run left output.dir twice"
status=$(cat nocfg.status)
only_rank1 nocfg.log "cannot open config file 'tiny.ini'"
[[ -e nocfg ]] && fail "the refused run left output.dir nocfg"

echo "--- the same run with every rank alike"
mpmd alike.log -wdir wd0 "$MESHTRAIN_BIN" "${args[@]}" --data.dir=data --output.dir="$TEST_TMP/alike" -- \
  -wdir wd0 "$MESHTRAIN_BIN" "${args[@]}" --data.dir=data --output.dir="$TEST_TMP/alike"
[[ $status -eq 0 ]] || { tail -20 alike.log; fail "the run with every rank alike failed ($status)"; }
[[ $(last_step alike/metrics.jsonl) == 4 ]] || fail "the run with every rank alike did not reach step 4"
ls alike/.meshtrain-shared-probe-* alike/checkpoints/.meshtrain-shared-probe-* 2>/dev/null &&
  fail "a probe file was left behind"
finish "ranks that see other directories, settings or data, or an error only one raises: refused at start-up with one message"
