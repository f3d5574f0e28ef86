#!/usr/bin/env bash
# The jobscripts in jobscripts/ (the Slurm one runs for real in slurm_preempt.sh):
#  * each parses (bash -n), opens with a comment block that says what it runs, how to scale
#    it and a back-of-envelope memory and time estimate, exports no RANK/WORLD_SIZE/
#    MASTER_ADDR-style variables, and its default config is valid (`meshtrain plan`);
#  * the Slurm scripts ask for --signal=B:USR1@T and --requeue, trap USR1 and TERM and
#    requeue on exit status 75;
#  * mpirun-workstation.sh: SIGTERM to the script -> the ranks save and it exits 75; the
#    same command again resumes and finishes;
#  * pbs.sh outside PBS (PBS_* variables, a node file, and stand-ins for qsub/qstat that
#    record their arguments): SIGTERM -> 75 -> it submits its continuation with a
#    dependency on this job and the same run directory; the continuation
#    (MESHTRAIN_RESUBMITS=1) resumes from the newest checkpoint although MESHTRAIN_ARGS
#    gives checkpoint.resume=none (which started the first job afresh).
set -uo pipefail
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
cd "$TEST_TMP" || exit 1
source "$MESHTRAIN_SOURCE_DIR/tests/batch/batch_lib.sh"
js=$MESHTRAIN_SOURCE_DIR/jobscripts

echo "--- static checks"
for f in slurm-cpu.sbatch slurm-gpu.sbatch pbs.sh mpirun-workstation.sh; do
  s=$js/$f
  [[ -x $s ]] || fail "$f is not executable"
  bash -n "$s" || fail "$f: syntax error"
  header=$(sed -n '2,/^# -\{20,\}$/p' "$s" | sed -n '2,$p')
  [[ $header == *"Back of the envelope"* && $header == *memory:* && $header == *time:* ]] ||
    fail "$f: the opening comment lacks the back-of-envelope memory and time estimate"
  grep -Eq '^#   (sbatch|qsub|jobscripts/mpirun-workstation.sh|NP=)' "$s" || fail "$f: the opening comment shows no usage"
  if grep -Eq '(^|[^A-Z_])(RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT|LOCAL_RANK)=' "$s"; then
    fail "$f sets a RANK/WORLD_SIZE/MASTER_ADDR-style variable: MPI provides all of that"
  fi
  config=$(sed -n 's/^config=\${[A-Z_0-9]*:-\(.*\)}$/\1/p' "$s" | head -n1)
  [[ -n $config ]] || { fail "$f: no default config found"; continue; }
  "$MESHTRAIN_BIN" plan "$MESHTRAIN_SOURCE_DIR/$config" --plan.world_size=8 --plan.gpus_per_node=4 \
    --plan.device_memory=80GiB >"plan_$f.log" 2>&1 || { cat "plan_$f.log"; fail "$f: its default config $config is not valid"; }
  echo "$f: default config $config, header ok"
done
for f in slurm-cpu.sbatch slurm-gpu.sbatch; do
  s=$js/$f
  grep -Eq '^#SBATCH --signal=B:USR1@[0-9]+' "$s" || fail "$f: no #SBATCH --signal=B:USR1@<seconds>"
  grep -q '^#SBATCH --requeue' "$s" || fail "$f: no #SBATCH --requeue"
  grep -q "trap .* USR1" "$s" && grep -q "trap .* TERM" "$s" || fail "$f: does not trap USR1 and TERM"
  grep -q 'status == 75' "$s" && grep -q 'scontrol requeue "$SLURM_JOB_ID"' "$s" || fail "$f: does not requeue on 75"
  grep -q '^"$supervise" --slurm -- ' "$s" || fail "$f: does not launch with meshtrain-supervise --slurm (srun)"
done
grep -q '^#PBS ' "$js/pbs.sh" && grep -q '^mpiexec ' "$js/pbs.sh" || fail "pbs.sh: no #PBS directives or mpiexec"

# run_until_step SCRIPT_LOG METRICS: the background script $launcher reaches step 5, then
# gets SIGTERM; sets $status.
stop_after_step5() {
  if ! wait_for_step "$2" 5 120 "$launcher"; then
    cat "$1"
    fail "no progress"
    kill -9 "$launcher" 2>/dev/null
    status=-1
    return
  fi
  kill -TERM "$launcher"
  wait_pid "$launcher" 120
  status=$?
}

echo "--- mpirun-workstation.sh: SIGTERM, then resume"
ws=(env NP=2 MESHTRAIN="$MESHTRAIN_BIN" MESHTRAIN_RUN_DIR="$TEST_TMP/ws" "$js/mpirun-workstation.sh" "$tiny"
    --data.dir=random --train.steps=100)
"${ws[@]}" >ws1.log 2>&1 &
launcher=$!
stop_after_step5 ws1.log ws/metrics.jsonl
grep "^\[workstation" ws1.log
[[ $status -eq 75 ]] || { tail -20 ws1.log; fail "workstation: exit status $status after SIGTERM, expected 75"; }
"${ws[@]}" >ws2.log 2>&1
status=$?
grep "^\[workstation\|resumed from" ws2.log
[[ $status -eq 0 ]] || { tail -20 ws2.log; fail "workstation: the second run exited $status"; }
grep -q "resumed from $TEST_TMP/ws/checkpoints/step_" ws2.log || fail "workstation: the second run did not resume"
[[ $(last_step ws/metrics.jsonl) == 100 ]] || fail "workstation: the resumed run did not reach step 100"

echo "--- pbs.sh outside PBS: SIGTERM -> 75 -> continuation submitted"
mkdir -p stubs pbs
printf '#!/bin/sh\necho "$@" >>%s/qsub.args\necho 43.pbs-server\n' "$TEST_TMP" >stubs/qsub
printf '#!/bin/sh\necho "    Resource_List.select = 1:ncpus=2:mpiprocs=2"\necho "    Resource_List.walltime = 00:10:00"\n' >stubs/qstat
chmod +x stubs/qsub stubs/qstat
printf 'localhost\nlocalhost\n' >pbs/nodefile
pbs_env=(env PATH="$TEST_TMP/stubs:$PATH" PBS_O_WORKDIR="$MESHTRAIN_SOURCE_DIR"
  PBS_JOBID=42.pbs-server PBS_JOBNAME=meshtrain-test PBS_NODEFILE="$TEST_TMP/pbs/nodefile"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_MCA_hwloc_base_binding_policy=none MESHTRAIN="$MESHTRAIN_BIN" MESHTRAIN_CONFIG="$tiny"
  MESHTRAIN_RUN_DIR="$TEST_TMP/pbs/run")
# checkpoint.resume=none in MESHTRAIN_ARGS: the first job starts afresh, its continuation
# must still continue it (below).
(cd "$MESHTRAIN_SOURCE_DIR" &&
  exec "${pbs_env[@]}" MESHTRAIN_ARGS="--data.dir=random --train.steps=100 --checkpoint.resume=none" "$js/pbs.sh") \
  >pbs.log 2>&1 &
launcher=$!
stop_after_step5 pbs.log pbs/run/metrics.jsonl
grep "^\[pbs" pbs.log
[[ $status -eq 0 ]] || { tail -20 pbs.log; fail "pbs: exit status $status, expected 0 (saved, continuation submitted)"; }
grep -q "meshtrain exited with status 75" pbs.log || fail "pbs: the run did not stop with 75"
ls pbs/run/checkpoints/step_*.h5 >/dev/null 2>&1 || fail "pbs: no checkpoint"
echo "qsub $(cat qsub.args 2>/dev/null)"
args=$(cat qsub.args 2>/dev/null)
[[ $args == *"-W depend=afterany:42.pbs-server"* ]] || fail "pbs: the continuation does not depend on this job"
[[ $args == *"-l select=1:ncpus=2:mpiprocs=2"*"-l walltime=00:10:00"* ]] || fail "pbs: the continuation lost the resources"
[[ $args == *"MESHTRAIN_RUN_DIR=$TEST_TMP/pbs/run"*"MESHTRAIN_RESUBMITS=1"* ]] ||
  fail "pbs: the continuation does not reuse the run directory"
[[ $args == *"$MESHTRAIN_SOURCE_DIR/jobscripts/pbs.sh" ]] || fail "pbs: the continuation is not this script"

echo "--- pbs.sh: the continuation continues the run, whatever checkpoint.resume MESHTRAIN_ARGS gives"
saved=$(sed -n 's/^step_0*\([0-9]*\)\.h5$/\1/p' pbs/run/checkpoints/latest)
[[ $saved =~ ^[0-9]+$ ]] || fail "pbs: latest names no checkpoint"
(cd "$MESHTRAIN_SOURCE_DIR" &&
  exec "${pbs_env[@]}" MESHTRAIN_RESUBMITS=1 \
    MESHTRAIN_ARGS="--data.dir=random --train.steps=$((saved + 2)) --checkpoint.resume none --checkpoint.overwrite=true" \
    "$js/pbs.sh") >pbs2.log 2>&1
status=$?
grep "^\[pbs\|resumed from" pbs2.log
[[ $status -eq 0 ]] || { tail -20 pbs2.log; fail "pbs: the continuation exited $status"; }
grep -q "a continuation: checkpoint.resume=auto replaces checkpoint.resume=none" pbs2.log ||
  fail "pbs: the continuation does not say that it replaced checkpoint.resume"
! grep -q "checkpoint.overwrite=true has no effect" pbs2.log || fail "pbs: the continuation kept checkpoint.overwrite"
grep -q "resumed from $TEST_TMP/pbs/run/checkpoints/step_0*$saved.h5: step $saved" pbs2.log ||
  fail "pbs: the continuation did not resume from step $saved"
[[ $(last_step pbs/run/metrics.jsonl) == $((saved + 2)) ]] || fail "pbs: the continuation did not reach step $((saved + 2))"
finish "jobscripts: headers, Slurm directives, workstation stop/resume, PBS continuation (and its resume)"
