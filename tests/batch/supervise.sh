#!/usr/bin/env bash
# scripts/meshtrain-supervise's decisions (issue 31), without root or a cluster: the
# "hosts" of its host file are names only, a stand-in `mpirun` (MESHTRAIN_MPIRUN) logs the
# host file it gets and runs the ranks here with the real mpirun, and a stand-in probe
# answers for every host not listed in $TEST_TMP/down. Rank 2 is killed at step 12 by
# fault injection (MESHTRAIN_FAULT, first launch only); the stand-in then marks host hC
# down, as if the node had died with it.
#  1. usage errors: one `error:` line, exit 2, nothing written;
#  2. a bad configuration: meshtrain's exit 2 is passed on after one launch (no recovery);
#  3. a lost host (checkpoint.resume=none given: a fresh start): the relaunch gets a host
#     file without hC and 2 ranks, checkpoint.resume=auto replacing none (the mesh and the
#     gradient accumulation chosen again: dp 3 x accum 2 -> dp 2 x accum 3), resumes from the
#     step-10 checkpoint and finishes; recoveries.jsonl and summary.json hold the recovery;
#  4. the restart bound: with MESHTRAIN_SUPERVISE_MAX_RESTARTS=0 the same loss ends with 76;
#     the next start (a requeue, SLURM_RESTART_COUNT=1, every host back) runs on all 3 hosts
#     from the checkpoint, checkpoint.resume=auto replacing the arguments' none; a first
#     launch passes checkpoint.resume as given (none over bound's checkpoints: meshtrain's 2);
#  5. ranks killed but every host answering: the run restarts on all 3 hosts;
#  6. a memory budget that 3 ranks meet and 2 do not: the relaunch is refused by meshtrain
#     (exit 2, "no strategy fits the memory budget"), and the supervisor passes 2 on;
#  7. the newest checkpoint's step (the recovery's log line and record) reads `latest` as
#     meshtrain does: exactly one checkpoint name that exists (a newline allowed), else the
#     step is unknown (null) -- two lines, a space, a CR, a .tmp, a path, another spelling, a
#     missing file, empty, a NUL byte, a FIFO (not read: no hang) --; no `latest`: the
#     highest step_*.h5.
set -uo pipefail
source "$MESHTRAIN_SOURCE_DIR/tests/support/time_limits.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
supervise=$MESHTRAIN_SOURCE_DIR/scripts/meshtrain-supervise

printf 'hA slots=1\nhB slots=1\nhC slots=1  # the third host\n' >hosts
cat >mpirun-stub <<EOF2
#!/bin/bash
# -np N --hostfile F ARGS...: logs the hosts, then runs ARGS on N local ranks.
np=\$2 hf=\$4
shift 4
n=\$(( \$(cat "$TEST_TMP/launches" 2>/dev/null || echo 0) + 1 ))
echo "\$n" >"$TEST_TMP/launches"
echo "launch \$n: np \$np hosts \$(awk '{print \$1}' "\$hf" | paste -sd,)" >>"$TEST_TMP/stub.log"
if [[ \$n == 1 && -n \${STUB_KILL:-} ]]; then
  export MESHTRAIN_FAULT=collective:rank=2:step=12
  $MPIEXEC -n "\$np" "\$@"
  status=\$?
  [[ \$STUB_KILL == host ]] && echo hC >"$TEST_TMP/down"
  exit \$status
fi
exec $MPIEXEC -n "\$np" "\$@"
EOF2
# shellcheck disable=SC2016  # $1 is the probe's own argument
printf '#!/bin/bash\n! grep -qx "$1" "%s/down" 2>/dev/null\n' "$TEST_TMP" >probe
chmod +x mpirun-stub probe
export MESHTRAIN_MPIRUN=$TEST_TMP/mpirun-stub
args=("$MESHTRAIN_BIN" train "$tiny" --data.dir=random --train.eval_every=0 --train.global_batch=12 --train.steps=20
      --train.log_every=1 --checkpoint.every=5 --checkpoint.keep=100 --parallel.collective_timeout=5)
sup() { "$supervise" --hostfile hosts --probe "$TEST_TMP/probe" "$@"; }
reset() { rm -f launches stub.log down; }

echo "--- 1. usage errors"
usage() {  # usage LABEL EXPECTED_MESSAGE ARGS...
  local label=$1 want=$2
  shift 2
  "$supervise" "$@" >"$label.log" 2>&1
  local st=$?
  [[ $st == 2 ]] || fail "$label: exit status $st, expected 2"
  grep -q "^meshtrain-supervise: error: $want" "$label.log" || { cat "$label.log"; fail "$label: no error '$want'"; }
  [[ $(grep -c "error" "$label.log") == 1 ]] || fail "$label: more than one error line"
  [[ ! -e launches && ! -e u ]] || fail "$label: something was launched or written"
}
usage no_dir "the command must set --output.dir=DIR" --hostfile hosts -- "${args[@]}"
usage no_hosts "cannot read the host file 'nowhere'" --hostfile nowhere -- "${args[@]}" --output.dir=u
usage no_mode "give --hostfile FILE" -- "${args[@]}" --output.dir=u
usage bad_opt "unknown option '--frobnicate'" --frobnicate -- "${args[@]}" --output.dir=u
usage bad_max "--max-restarts must be a number" --hostfile hosts --max-restarts x -- "${args[@]}" --output.dir=u
usage no_cmd "no command" --hostfile hosts
usage no_slurm "--slurm needs a Slurm allocation" --slurm -- "${args[@]}" --output.dir=u

echo "--- 2. a bad configuration is passed on"
reset
sup -- "${args[@]}" --train.lr=-1 --output.dir=bad >bad.log 2>&1
st=$?
[[ $st == 2 ]] || { cat bad.log; fail "bad config: exit status $st, expected 2"; }
[[ $(cat launches) == 1 ]] || fail "bad config: $(cat launches) launches, expected 1"

echo "--- 3. a lost host"
reset
# checkpoint.resume=none: the first launch starts afresh, the relaunch continues the run (and
# drops checkpoint.overwrite, which would only warn that it does nothing with auto).
STUB_KILL=host sup -- "${args[@]}" --checkpoint.resume=none --checkpoint.overwrite=true --output.dir=run >run.log 2>&1
st=$?
cat stub.log
grep "^\[meshtrain-supervise" run.log | cut -c1-240
[[ $st == 0 ]] || { tail -n 30 run.log; fail "lost host: exit status $st, expected 0"; }
[[ $(cat stub.log) == $'launch 1: np 3 hosts hA,hB,hC\nlaunch 2: np 2 hosts hA,hB' ]] ||
  fail "lost host: launches '$(cat stub.log)', expected 3 ranks on hA,hB,hC then 2 on hA,hB"
grep -q "batch: 12 sequences x 32 tokens per step = micro_batch 2 x dp 3 x grad_accum 2" run.log ||
  fail "the first launch is not dp 3 x grad_accum 2"
grep -q "batch: 12 sequences x 32 tokens per step = micro_batch 2 x dp 2 x grad_accum 3" run.log ||
  fail "the relaunch is not dp 2 x grad_accum 3 (global batch kept)"
grep -q "resumed from run/checkpoints/step_00000010.h5: step 10" run.log || fail "the relaunch did not resume at step 10"
grep -q "launch 2 continues the run: checkpoint.resume=auto replaces checkpoint.resume=none" run.log ||
  fail "the relaunch does not say that checkpoint.resume=auto replaced none"
! grep -q "checkpoint.overwrite=true has no effect" run.log || fail "the relaunch kept checkpoint.overwrite"
grep -q "recovery 1 of at most 3: lost \[hC\] (hC does not answer)" run.log || fail "no recovery line for hC"
"$py" - run <<'PY' || fail "lost host: the records are wrong"
import json, sys
run = sys.argv[1]
lines = [json.loads(l) for l in open(run + "/recoveries.jsonl")]
summ = json.load(open(run + "/summary.json"))["recoveries"]
print("recoveries.jsonl:", lines)
# The supervisor writes the record before the relaunch and fills in its times once the first
# step is seen, which may come after the run wrote summary.json: compare what is known first.
fixed = lambda r: {k: v for k, v in r.items() if k not in ("time_utc", "first_step", "relaunch_to_first_step_s",
                                                            "loss_to_first_step_s")}
assert [fixed(r) for r in lines] == [fixed(r) for r in summ], "summary.json's recoveries differ from recoveries.jsonl"
assert lines[0]["first_step"] == 11, lines
r = lines[0]
assert len(lines) == 1 and r["lost_hosts"] == ["hC"] and r["hosts"] == ["hA", "hB"] and r["ranks_after"] == 2, r
assert r["resume_step"] == 10 and r["first_step"] == 11 and r["launcher_status"] != 0, r
recs = [json.loads(l) for l in open(run + "/metrics.jsonl")]
assert [x["step"] for x in recs] == list(range(1, 21)) and recs[-1]["tokens"] == 20 * 12 * 32
PY

echo "--- 4. the restart bound"
reset
STUB_KILL=host MESHTRAIN_SUPERVISE_MAX_RESTARTS=0 sup -- "${args[@]}" --output.dir=bound >bound.log 2>&1
st=$?
[[ $st == 76 ]] || { tail -n 20 bound.log; fail "bound: exit status $st, expected 76"; }
[[ $(cat launches) == 1 ]] || fail "bound: $(cat launches) launches, expected 1"
grep -q "but 0 recoveries were made already (--max-restarts 0): giving up" bound.log || fail "bound: no giving-up line"

echo "--- 4b. the next start (a requeue) with every host back uses them all, and continues the run"
rm -f launches stub.log down
SLURM_RESTART_COUNT=1 sup -- "${args[@]}" --checkpoint.resume=none --output.dir=bound >requeue.log 2>&1
st=$?
[[ $st == 0 ]] || { tail -n 20 requeue.log; fail "requeue: exit status $st, expected 0"; }
[[ $(cat stub.log) == "launch 1: np 3 hosts hA,hB,hC" ]] || fail "requeue: launches '$(cat stub.log)', expected one on all 3 hosts"
grep -q "resumed from bound/checkpoints/step_00000010.h5: step 10" requeue.log || fail "requeue: did not resume at step 10"
grep -qF "launch 1 continues the run: checkpoint.resume=auto replaces checkpoint.resume=none (a requeued job: SLURM_RESTART_COUNT=1)" \
  requeue.log || fail "requeue: no line saying that checkpoint.resume=auto replaced none"

echo "--- 4c. a first launch (no requeue) runs checkpoint.resume as given"
rm -f launches stub.log down
sup -- "${args[@]}" --checkpoint.resume=none --output.dir=bound >given.log 2>&1
st=$?
[[ $st == 2 ]] || { tail -n 20 given.log; fail "given: exit status $st, expected 2 (meshtrain refuses a new run over bound's checkpoints)"; }
[[ $(cat launches) == 1 ]] || fail "given: $(cat launches) launches, expected 1"
grep -q "bound/checkpoints holds [0-9]* checkpoints of another run" given.log ||
  { tail -n 20 given.log; fail "given: checkpoint.resume=none did not reach meshtrain"; }

echo "--- 5. ranks killed, every host answers"
reset
STUB_KILL=ranks sup -- "${args[@]}" --output.dir=ranks >ranks.log 2>&1
st=$?
[[ $st == 0 ]] || { tail -n 20 ranks.log; fail "ranks: exit status $st, expected 0"; }
[[ $(sed -n 2p stub.log) == "launch 2: np 3 hosts hA,hB,hC" ]] || fail "ranks: relaunch '$(sed -n 2p stub.log)', expected all 3 hosts"
grep -q "the ranks failed, not the hosts" ranks.log || fail "ranks: no 'ranks failed' line"
echo "--- 6. the survivors' mesh does not fit in memory"
# parallel.memory_limit=2.95MiB (2.51 MiB usable): 3 ranks fit (shard_grad_op, 2.31 MiB per
# rank), 2 do not (no_shard needs 2.62 MiB): the relaunch is meshtrain's user error, passed on.
reset
STUB_KILL=host sup -- "${args[@]}" --parallel.memory_limit=2.95MiB --output.dir=nofit >nofit.log 2>&1
st=$?
[[ $st == 2 ]] || { tail -n 20 nofit.log; fail "nofit: exit status $st, expected 2"; }
[[ $(cat launches) == 2 ]] || fail "nofit: $(cat launches) launches, expected 2"
grep -q "error: parallel.strategy=auto: no strategy fits the memory budget" nofit.log ||
  fail "nofit: no error saying that the mesh does not fit"
grep -q "launch 2 ended with status 2" nofit.log || fail "nofit: the relaunch's status 2 was not passed on"

echo "--- 7. the newest checkpoint's step: \`latest\` read as strictly as meshtrain reads it"
# A stand-in launcher that runs nothing: launch 1 loses hC (exit 137, hC then down), launch 2
# is refused (exit 2, as meshtrain refuses a damaged `latest`).
cat >fake-launcher <<EOF2
#!/bin/bash
n=\$(( \$(cat "$TEST_TMP/launches" 2>/dev/null || echo 0) + 1 ))
echo "\$n" >"$TEST_TMP/launches"
[[ \$n == 1 ]] && { echo hC >"$TEST_TMP/down"; exit 137; }
exit 2
EOF2
chmod +x fake-launcher
# latest_case NAME STEP CONTENT: checkpoints of steps 5 and 10 (and two files that are not
# checkpoints), `latest` holding CONTENT (a printf format; FIFO: a named pipe; NONE: no
# `latest`); the step the supervisor reports is STEP (null: unknown).
latest_case() {
  local name=$1 want=$2 content=$3 d=latest_$1 st before=$failures
  reset
  mkdir -p "$d/checkpoints"
  touch "$d"/checkpoints/{step_00000005.h5,step_00000010.h5,step_00000020.h5.tmp,step_30.h5}
  # shellcheck disable=SC2059  # the content is a format: \n, \r, \0
  case $content in
    NONE) ;;
    FIFO) mkfifo "$d/checkpoints/latest" ;;
    *) printf "$content" >"$d/checkpoints/latest" ;;
  esac
  MESHTRAIN_MPIRUN=$TEST_TMP/fake-launcher timeout $((60 * time_scale)) "$supervise" --hostfile hosts \
    --probe "$TEST_TMP/probe" -- "${args[@]}" --output.dir="$d" >"$d.log" 2>&1
  st=$?
  [[ $st == 2 && $(cat launches) == 2 ]] ||
    { cat "$d.log"; fail "latest $name: exit status $st after $(cat launches) launch(es), expected 2 after 2"; return; }
  grep -q "newest complete checkpoint step ${want/null/unknown};" "$d.log" ||
    { cat "$d.log"; fail "latest $name: the recovery line does not say step ${want/null/unknown}"; }
  "$py" - "$d/recoveries.jsonl" "$want" <<'PY' || fail "latest $name: recoveries.jsonl's resume_step is not $want"
import json, sys
rec = [json.loads(l) for l in open(sys.argv[1])]
assert len(rec) == 1 and rec[0]["resume_step"] == json.loads(sys.argv[2]), rec
PY
  if [[ $want == null ]]; then
    grep -q "warning: .*/latest is not one checkpoint file name that exists" "$d.log" || fail "latest $name: no warning"
  fi
  ((failures == before)) && echo "latest $name: step $want"
}
latest_case good 10 'step_00000010.h5\n'
latest_case no_newline 10 'step_00000010.h5'
latest_case none 10 NONE
latest_case two_lines null 'step_00000010.h5\nstep_00000005.h5\n'
latest_case space null 'step_00000010.h5 \n'
latest_case crlf null 'step_00000010.h5\r\n'
latest_case tmp null 'step_00000020.h5.tmp\n'
latest_case path null 'checkpoints/step_00000010.h5\n'
latest_case other_spelling null 'step_30.h5\n'
latest_case missing null 'step_00000040.h5\n'
latest_case empty null ''
latest_case nul null 'step_00000010.h5\0\n'
latest_case fifo null FIFO
finish "meshtrain-supervise: usage errors, pass-through, recovery on fewer hosts, the restart bound, a rank failure, a mesh that no longer fits, \`latest\` read as meshtrain reads it"
