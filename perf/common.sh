# Sourced by the perf/ scripts: paths, the launcher, thread pinning, the BLAS environment
# and the load-average gate. Every command of a benchmark (meshtrain and PyTorch alike) runs
# under exactly this environment.
PERF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$PERF_DIR/.." && pwd)
MESHTRAIN=${MESHTRAIN:-$ROOT/build/cpu/bin/meshtrain}
PY=${PY:-/usr/bin/python3}          # Debian's Python: torch 1.13 (CPU), numpy, matplotlib
THREADS=${THREADS:-1}               # threads per rank, for meshtrain and PyTorch alike
PERF_MAX_LOAD=${PERF_MAX_LOAD:-1.5} # wait for a 1-minute load average below this before measuring
PERF_WAIT_MAX=${PERF_WAIT_MAX:-1800}

[[ -x $MESHTRAIN ]] || { echo "perf: $MESHTRAIN not found; build first (cmake --preset cpu && cmake --build build/cpu) or set MESHTRAIN=" >&2; exit 2; }

# Thread pinning per rank: Kokkos (OpenMP), OpenBLAS, and torch.set_num_threads (--threads).
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS OMP_PROC_BIND=false
# BLAS kernel: some of these machines set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE system-wide,
# which forces an older kernel. PERF_NATIVE_BLAS=1 (default) unsets both, for every command
# of the run (meshtrain and PyTorch link the same libopenblas); =0 keeps the machine's setting.
BLAS_ENV_ORIGINAL="OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>}"
if [[ ${PERF_NATIVE_BLAS:-1} == 1 ]]; then
  unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
fi
BLAS_ENV_USED="OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-<unset>}"

MPI_FLAGS=(--bind-to none --oversubscribe)
if [[ $(id -u) == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  MPI_FLAGS+=(--allow-run-as-root)
fi
# mpirun_n N CMD...: N ranks on this machine, the environment above exported to every rank.
mpirun_n() {
  local n=$1; shift
  mpirun -np "$n" "${MPI_FLAGS[@]}" -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OMP_PROC_BIND "$@"
}

# A results directory (OUT_DIR) is replaced only by a run that finished: a script writes into
# `OUT=$(stage_results "$FINAL_OUT")` (FINAL_OUT.partial, emptied) and ends with
# `publish_results "$OUT" "$FINAL_OUT"`. A run that fails, is interrupted or fails a check of
# its own leaves the previous results as they were (most are committed) and its partial ones
# in FINAL_OUT.partial. A run directory's config.ini names the directory it ran in (output.dir,
# and a rerun of that file continues from the checkpoints there): publish_results rewrites the
# staging path in every config.ini to the published one (logs and checkpoints' attributes keep
# it; they record where the run happened). The hand-written files of a results directory,
# NOTE.md and SECTION.md (perf/report.py puts them into perf/README.md), are kept across runs.
stage_results() {
  local stage="$1.partial"
  rm -rf "$stage" && mkdir -p "$stage" && printf '%s\n' "$stage"
}
publish_results() {
  local stage=$1 out=$2 f
  for f in NOTE.md SECTION.md; do
    if [[ -e $out/$f && ! -e $stage/$f ]]; then cp -p "$out/$f" "$stage/$f"; fi
  done
  local ini text
  while IFS= read -r -d '' ini; do
    text=$(<"$ini")
    if [[ $text == *"$stage"* ]]; then printf '%s\n' "${text//"$stage"/"$out"}" >"$ini"; fi
  done < <(find "$stage" -name config.ini -type f -print0)
  rm -rf "$out" && mv "$stage" "$out"
}

load1() { cut -d' ' -f1 /proc/loadavg; }
# wait_quiet: block until the 1-minute load average is below PERF_MAX_LOAD (other users'
# compiles distort timings); gives up after PERF_WAIT_MAX seconds and says so.
wait_quiet() {
  local waited=0
  while awk -v l="$(load1)" -v m="$PERF_MAX_LOAD" 'BEGIN{exit !(l >= m)}'; do
    if (( waited >= PERF_WAIT_MAX )); then
      echo "perf: WARNING: load average still $(load1) after ${waited}s; measuring anyway (numbers are suspect)" >&2
      return 1
    fi
    (( waited % 60 == 0 )) && echo "perf: load average $(load1) >= $PERF_MAX_LOAD; waiting for a quiet machine (${waited}s)" >&2
    sleep 10; waited=$((waited + 10))
  done
  return 0
}

# others_running: runnable tasks on the machine right now besides this sampler, averaged over
# 10 samples in 1 s (/proc/loadavg field 4). Between our own runs this is other users' load.
others_running() {
  # Read with the shell's own `read` (no child processes): a sampler that forks `cut` would
  # count its own pipeline as "others running" and wait_idle would never see an idle machine.
  local i sum=0 a b c runq rest
  for i in 1 2 3 4 5 6 7 8 9 10; do
    read -r a b c runq rest < /proc/loadavg
    sum=$(( sum + ${runq%%/*} - 1 ))
    sleep 0.1
  done
  awk -v s=$sum 'BEGIN{printf "%.1f", s / 10}'
}
# wait_idle: between runs, wait (up to PERF_IDLE_MAX s) until nobody else is running, so a run
# does not start in the middle of someone's compile. The 1-minute load average cannot tell:
# it still holds our own previous run. PERF_IDLE_MAX=0: never wait, and do not sample either
# (a run's "others running before" is still recorded).
PERF_IDLE_MAX=${PERF_IDLE_MAX:-600}
wait_idle() {
  (( PERF_IDLE_MAX > 0 )) || return 0
  local waited=0
  while awk -v o="$(others_running)" 'BEGIN{exit !(o >= 0.5)}'; do
    (( waited >= PERF_IDLE_MAX )) && { echo "perf: WARNING: other processes still running after ${waited}s" >&2; return 1; }
    sleep 5; waited=$((waited + 6))
  done
}

# The OpenBLAS kernel actually selected (after the environment above).
openblas_core() {
  "$PY" - <<'PYEOF' 2>/dev/null || echo unknown
import ctypes
lib = ctypes.CDLL("libopenblas.so.0")
lib.openblas_get_corename.restype = ctypes.c_char_p
lib.openblas_get_config.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode(), "|", lib.openblas_get_config().decode())
PYEOF
}

# machine_json FILE: what the numbers were measured on.
machine_json() {
  "$PY" - "$1" <<PYEOF
import json, os, platform, subprocess, sys, time
cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
json.dump({
  "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(), "cpu": cpu[0] if cpu else "?",
  "cores": os.cpu_count(), "threads_per_rank": int("$THREADS"),
  "openblas_core": """$(openblas_core)""".strip(), "blas_env_original": "$BLAS_ENV_ORIGINAL",
  "blas_env_used": "$BLAS_ENV_USED", "load_at_start": float(open("/proc/loadavg").read().split()[0]),
  "meshtrain": subprocess.run(["$MESHTRAIN", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
}, open(sys.argv[1], "w"), indent=1)
PYEOF
}
