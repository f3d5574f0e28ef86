#!/usr/bin/env bash
# The demo command (README): installs the dependencies, builds the `cpu` preset and
# runs meshtrain on 4 ranks. For now the demo prints the device mesh that a 4-rank job
# with tensor parallelism 2 uses (2 data-parallel shards x 2 tensor-parallel ranks, and
# each rank's groups); it becomes the training demo when `meshtrain train` lands.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${MESHTRAIN_BUILD_DIR:-build/cpu}

bash scripts/install-deps.sh
cmake --preset cpu -B "$build_dir"
cmake --build "$build_dir" -j"$(nproc)"

# Open MPI refuses to run as root and to start more ranks than cores without these.
mpirun_flags=()
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  mpirun_flags+=(--oversubscribe --bind-to none)
  [[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
fi
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

set -x
mpirun -np 4 "${mpirun_flags[@]}" "$build_dir/bin/meshtrain" plan --parallel.tp=2
