#!/usr/bin/env bash
# The demo command (README): installs the dependencies, builds the `cpu` preset, turns the
# English text of Debian's `fortunes` package into a byte-level dataset, trains a small
# GPT on 2 ranks with FSDP (inputs/demo.ini, a few minutes on 2 cores) and prints a sample.
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
# One thread per rank: 2 ranks on 2 cores.
export OMP_PROC_BIND=false OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

set -x
"$build_dir/bin/meshtrain" prepare --input /usr/share/games/fortunes --output data/fortunes
rm -rf runs/demo
mpirun -np 2 "${mpirun_flags[@]}" "$build_dir/bin/meshtrain" train inputs/demo.ini
