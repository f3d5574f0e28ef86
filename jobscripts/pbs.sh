#!/bin/bash
# ----------------------------------------------------------------------------------------
# meshtrain under PBS Pro / OpenPBS / Torque: trains inputs/demo.ini (a 1.9 M-parameter
# byte-level GPT on the `fortunes` corpus, FSDP full_shard) with `mpiexec`, one MPI rank
# per mpiprocs slot, and continues after a preemption or the walltime by saving a
# checkpoint and submitting its own continuation.
#
#   qsub jobscripts/pbs.sh                                       # 1 node x 2 ranks
#   qsub -l select=4:ncpus=32:mpiprocs=8:ompthreads=4 -v MESHTRAIN_ARGS="--train.steps=2000" \
#        jobscripts/pbs.sh                                       # 32 ranks, 4 threads each
#   GPUs: qsub -l select=2:ncpus=32:ngpus=4:mpiprocs=4 -v MESHTRAIN_CONFIG=inputs/gpt2-86m.ini,\
#        MESHTRAIN=build/cuda/bin/meshtrain jobscripts/pbs.sh    # one rank per GPU
#   (Torque: -l nodes=4:ppn=8 instead of select.)
#
# PBS passes no arguments to a job script; everything comes from `qsub -v`:
#   MESHTRAIN_CONFIG   the config (default inputs/demo.ini)
#   MESHTRAIN_ARGS     --section.key=value overrides, space-separated
#   MESHTRAIN          the binary (default: `meshtrain` on PATH, else build/cpu/bin/meshtrain)
#   MESHTRAIN_RUN_DIR  output.dir (default runs/<job name>; continuations reuse it)
#   MESHTRAIN_MAX_RESUBMITS  stop resubmitting after this many continuations (default 20)
# The rank count is the number of lines of $PBS_NODEFILE (one per mpiprocs slot); ranks,
# nodes and the node-local rank come from MPI, so nothing like RANK/WORLD_SIZE/MASTER_ADDR
# is needed. OpenMP threads per rank: ompthreads (OMP_NUM_THREADS), else 1.
#
# Back of the envelope for the preset (`meshtrain plan inputs/demo.ini` on 2 ranks):
#   memory: ~92 MiB per rank with full_shard (3.5 MiB parameters, 7 MiB AdamW, 71 MiB
#     activations of an 8 x 128 micro-batch).
#   time: 45 GFLOP per step; 0.3-0.6 s per step on 2 cores, 400 steps in 2-4 minutes.
#   The data must exist first: `meshtrain prepare --input /usr/share/games/fortunes
#     --output data/fortunes`.
#
# Preemption and walltime: PBS sends SIGTERM before it kills a job (kill_delay, usually
# 10-30 s: enough for a small model's checkpoint; for big ones set train.time_limit a few
# minutes under the walltime). The trap forwards it to the ranks as SIGUSR1; they agree at
# the next step boundary, save the same step and exit with status 75. On 75 the script
# submits itself again (qsub -W depend=afterany:<this job>) with the same run directory;
# the continuation resumes from the newest checkpoint (checkpoint.resume=auto).
# Exit statuses (doc/batch.md): 0 done, 2 bad input, 3 aborted, 75 saved and stopped.
# ----------------------------------------------------------------------------------------
#PBS -N meshtrain
#PBS -l select=1:ncpus=2:mpiprocs=2:ompthreads=1
#PBS -l walltime=00:30:00
#PBS -j oe
#PBS -r y

set -uo pipefail
cd "${PBS_O_WORKDIR:-.}" || exit 1

config=${MESHTRAIN_CONFIG:-inputs/demo.ini}
read -r -a overrides <<<"${MESHTRAIN_ARGS:-}"
bin=${MESHTRAIN:-$(command -v meshtrain || echo build/cpu/bin/meshtrain)}
job_name=${PBS_JOBNAME:-meshtrain}
run_dir=${MESHTRAIN_RUN_DIR:-runs/$job_name}
resubmits=${MESHTRAIN_RESUBMITS:-0}
max_resubmits=${MESHTRAIN_MAX_RESUBMITS:-20}
ranks=$( [[ -n ${PBS_NODEFILE:-} && -r $PBS_NODEFILE ]] && wc -l <"$PBS_NODEFILE" || echo 2)

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMP_PROC_BIND=${OMP_PROC_BIND:-spread} OMP_PLACES=${OMP_PLACES:-cores}
export OPENBLAS_NUM_THREADS=1

log() { echo "[pbs $(date +%H:%M:%S)] $*"; }
log "job ${PBS_JOBID:-?} (continuation $resubmits): $ranks ranks, $OMP_NUM_THREADS thread(s) per rank"
# A continuation must find the checkpoints: a fixed output.dir and checkpoint.resume=auto,
# unless MESHTRAIN_ARGS sets them.
given() { local a; for a in "${@:2}"; do [[ $a == "--$1="* || $a == "--$1" ]] && return 0; done; return 1; }
# A continuation follows a save (status 75) and continues that run whatever MESHTRAIN_ARGS
# says: a checkpoint.resume=PATH there would go back to that step at every continuation,
# and none would start over (meshtrain refuses that over the run's own checkpoints).
# checkpoint.overwrite goes too: it concerns a start over another run only.
if (( resubmits > 0 )) && given checkpoint.resume "${overrides[@]}"; then
  kept=()
  for ((i = 0; i < ${#overrides[@]}; i++)); do
    case ${overrides[i]} in
      --checkpoint.resume=*) log "a continuation: checkpoint.resume=auto replaces ${overrides[i]#--}" ;;
      --checkpoint.resume) log "a continuation: checkpoint.resume=auto replaces checkpoint.resume=${overrides[i + 1]:-}"; ((i++)) ;;
      --checkpoint.overwrite=*) ;;
      --checkpoint.overwrite) ((i++)) ;;
      *) kept+=("${overrides[i]}") ;;
    esac
  done
  overrides=("${kept[@]}")
fi
run_args=()
given output.dir "${overrides[@]}" || run_args+=(--output.dir="$run_dir")
given checkpoint.resume "${overrides[@]}" || run_args+=(--checkpoint.resume=auto)
log "$bin train $config ${run_args[*]} ${overrides[*]}"

# -x exports these to every rank with Open MPI; MPICH/Hydra and PBS's own mpiexec pass the
# environment by default.
export_flags=()
if mpiexec --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then
  export_flags=(-x OMP_NUM_THREADS -x OMP_PROC_BIND -x OMP_PLACES -x OPENBLAS_NUM_THREADS)
fi
mpiexec -n "$ranks" "${export_flags[@]}" \
  "$bin" train "$config" "${run_args[@]}" "${overrides[@]}" &
launcher=$!

forward() {
  log "$1 received: forwarding SIGUSR1 to the ranks (they save at the next step boundary)"
  kill -USR1 "$launcher" 2>/dev/null  # mpiexec forwards SIGUSR1 to every rank
}
trap 'forward SIGTERM' TERM
trap 'forward SIGUSR1' USR1

while kill -0 "$launcher" 2>/dev/null; do wait "$launcher"; done
wait "$launcher"
status=$?
log "meshtrain exited with status $status"

if (( status == 75 )); then
  if (( resubmits >= max_resubmits )); then
    log "saved a checkpoint; not resubmitting: already $max_resubmits continuations (MESHTRAIN_MAX_RESUBMITS)"
    exit 75
  fi
  # Regular users cannot qrerun their own job on most sites; a dependent copy of this job
  # (same resources, same run directory) starts once this one has ended. The resources
  # given to qsub on the command line are read back from qstat.
  resources=()
  while IFS= read -r r; do resources+=(-l "$r"); done < <(qstat -f "$PBS_JOBID" 2>/dev/null |
    sed -n 's/^ *Resource_List\.\(select\|nodes\|walltime\) = \(.*\)$/\1=\2/p')
  next=$(qsub -N "$job_name" "${resources[@]}" -W depend=afterany:"$PBS_JOBID" \
           -v MESHTRAIN_CONFIG="$config",MESHTRAIN_ARGS="${MESHTRAIN_ARGS:-}",MESHTRAIN="$bin",MESHTRAIN_RUN_DIR="$run_dir",MESHTRAIN_RESUBMITS=$((resubmits + 1)),MESHTRAIN_MAX_RESUBMITS="$max_resubmits" \
           "$PBS_O_WORKDIR/jobscripts/pbs.sh") \
    && { log "saved a checkpoint in $run_dir/checkpoints; continuation submitted: $next"; exit 0; }
  log "qsub of the continuation failed; resubmit jobscripts/pbs.sh with MESHTRAIN_RUN_DIR=$run_dir to resume"
fi
exit "$status"
