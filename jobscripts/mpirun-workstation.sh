#!/usr/bin/env bash
# ----------------------------------------------------------------------------------------
# meshtrain on one workstation with `mpirun`: trains inputs/demo.ini (a 1.9 M-parameter
# byte-level GPT on the `fortunes` corpus, FSDP full_shard) on NP ranks, preparing the
# dataset first if it is missing. Ctrl-C (or SIGTERM) does not lose work: the ranks save a
# checkpoint at the next step and stop; running the script again resumes from it.
#
#   jobscripts/mpirun-workstation.sh                          # 2 ranks, the preset
#   NP=4 jobscripts/mpirun-workstation.sh inputs/demo.ini --train.steps=800
#   NP=8 MESHTRAIN=build/cuda/bin/meshtrain jobscripts/mpirun-workstation.sh \
#        inputs/gpt2-86m.ini --train.steps=200               # 8 GPUs, one rank each
#
# Arguments: CONFIG.ini (default inputs/demo.ini), then --section.key=value overrides.
# Environment (all optional):
#   NP                 ranks (default 2); on GPUs one per GPU
#   THREADS            OpenMP threads per rank (default: cores / NP, at least 1)
#   MESHTRAIN          the binary (default build/cpu/bin/meshtrain, else `meshtrain` on PATH)
#   MESHTRAIN_RUN_DIR  output.dir (default: the config's output.dir)
# Ranks and the node-local rank come from MPI; nothing like RANK/WORLD_SIZE/MASTER_ADDR is
# needed. Open MPI as root or with more ranks than cores needs --allow-run-as-root and
# --oversubscribe; the script adds them when they apply.
#
# Back of the envelope for the preset (`meshtrain plan inputs/demo.ini` on 2 ranks):
#   memory: ~92 MiB per rank with full_shard (3.5 MiB parameters, 7 MiB AdamW, 71 MiB
#     activations of an 8 x 128 micro-batch) plus ~40 MiB per process of libraries.
#   time: 6 x 1.9e6 params x 4096 tokens = 45 GFLOP per step (+ attention); 0.3-0.6 s per
#     step on 2 cores at 40-100 GFLOP/s each, 400 steps in 2-4 minutes. More ranks than
#     physical cores only adds communication.
# Exit statuses (doc/batch.md): 0 done, 2 bad input, 3 aborted, 75 saved and stopped.
# ----------------------------------------------------------------------------------------
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
config=${1:-inputs/demo.ini}
(( $# )) && shift
np=${NP:-2}
cores=$(nproc)
threads=${THREADS:-$(( cores / np > 0 ? cores / np : 1 ))}
bin=${MESHTRAIN:-build/cpu/bin/meshtrain}
[[ -x $bin ]] || bin=$(command -v meshtrain) || { echo "no meshtrain binary: build it (cmake --preset cpu && cmake --build build/cpu) or set MESHTRAIN" >&2; exit 2; }
# Resume from the newest checkpoint unless the arguments say otherwise.
given() { local a; for a in "${@:2}"; do [[ $a == "--$1="* || $a == "--$1" ]] && return 0; done; return 1; }
run_args=()
[[ -n ${MESHTRAIN_RUN_DIR:-} ]] && run_args+=(--output.dir="$MESHTRAIN_RUN_DIR")
given checkpoint.resume "$@" || run_args+=(--checkpoint.resume=auto)

log() { echo "[workstation $(date +%H:%M:%S)] $*"; }

# The preset's dataset: prepared once from Debian's fortunes package.
if [[ $config == inputs/demo.ini && ! -f data/fortunes/meta.json && " $* " != *" --data.dir="* ]]; then
  log "preparing data/fortunes from /usr/share/games/fortunes"
  "$bin" prepare --input /usr/share/games/fortunes --output data/fortunes || exit $?
fi

flags=()
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  flags+=(--bind-to none -x OMP_NUM_THREADS -x OMP_PROC_BIND -x OPENBLAS_NUM_THREADS)
  (( np > cores )) && flags+=(--oversubscribe)
  (( $(id -u) == 0 )) && flags+=(--allow-run-as-root)
fi
export OMP_NUM_THREADS=$threads OMP_PROC_BIND=${OMP_PROC_BIND:-false} OPENBLAS_NUM_THREADS=1

log "$np ranks x $threads thread(s): $bin train $config ${run_args[*]} $*"
# Own session: Ctrl-C in the terminal reaches this script only, which turns it into the
# save-and-stop request (SIGUSR1, which mpirun forwards to every rank).
setsid mpirun -np "$np" "${flags[@]}" "$bin" train "$config" "${run_args[@]}" "$@" &
launcher=$!
stops=0
stop() {
  stops=$((stops + 1))
  if (( stops == 1 )); then
    log "$1: asking the ranks to save a checkpoint at the next step and stop (again to kill)"
    kill -USR1 "$launcher" 2>/dev/null
  else
    log "$1 again: killing the job without saving"
    kill -TERM "$launcher" 2>/dev/null
  fi
}
trap 'stop Ctrl-C' INT
trap 'stop SIGTERM' TERM

while kill -0 "$launcher" 2>/dev/null; do wait "$launcher"; done
wait "$launcher"
status=$?
case $status in
  0) log "done" ;;
  75) log "saved a checkpoint and stopped; run the same command again to resume" ;;
  2) log "bad input (see the error above)" ;;
  *) log "meshtrain exited with status $status" ;;
esac
exit "$status"
