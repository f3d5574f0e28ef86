#!/usr/bin/env bash
# How a CUDA build launches its Kokkos kernels, read from the executables' symbols (no GPU).
#
# Kokkos' CUDA backend passes a kernel's functor (the lambda and everything it captures) as
# the kernel's parameter only while it is under 512 bytes: the "local memory" launch. A
# larger functor goes through constant memory (a wait on an event, then a copy from a pinned
# host staging buffer that every such launch shares) or, over 32 KiB, through global memory
# (a copy from the host's stack). Neither survives a CUDA graph (gpu.graphs,
# train/step_graph.hpp): under capture the event wait invalidates the capture, and a replay
# would copy whatever the staging buffer holds at replay time, not the functor captured.
# So every kernel a step may launch must take its functor as its parameter. Nothing in the
# compiler says when a lambda grows past 512 bytes (one more captured pointer array does it);
# its kernel's symbol does: Kokkos::Impl::cuda_parallel_launch_{local,constant,global}_memory.
#
#   perf/gpu/launch_check.sh EXECUTABLE_OR_OBJECT...
#
# Needs unstripped files (perf/gpu/pack.sh runs it on the build's executables before it
# strips its copies). Prints, per file, its kernels by launch; exits 1 naming each kernel
# launched through constant or global memory, 2 where a file has no Kokkos CUDA kernel at all
# (a host build, or stripped: nothing was checked) or cannot be read.
set -euo pipefail
[[ $# -gt 0 ]] || { echo "launch_check: no files (see the header of $0)" >&2; exit 2; }
bad=0
for f in "$@"; do
  [[ -f $f ]] || { echo "launch_check: no file $f" >&2; exit 2; }
  syms=$(nm "$f" 2>/dev/null) || { echo "launch_check: nm cannot read $f" >&2; exit 2; }
  # One kernel instance = one launcher symbol (the template function itself; the device
  # stubs and their guard variables are left out by anchoring on Kokkos::Impl, and the
  # compiler's split-off parts, `.cold` and the like, counted with their function).
  kernels=$(awk '{print $NF}' <<<"$syms" |
            { grep -E '^_ZN6Kokkos4ImplL?[0-9]+cuda_parallel_launch_(local|constant|global)_memory' || true; } |
            sed -E 's/\.(cold|isra|part|constprop)[.0-9]*$//' | sort -u)
  count() { { grep -c "cuda_parallel_launch_$1_memory" || true; } <<<"$kernels"; }
  local_n=$(count local) constant_n=$(count constant) global_n=$(count global)
  printf 'launch_check: %s: %d kernels with their functor as parameter, %d through constant memory, %d through global memory\n' \
    "$(basename "$f")" "$local_n" "$constant_n" "$global_n"
  if (( local_n + constant_n + global_n == 0 )); then
    echo "launch_check: $f has no Kokkos CUDA kernel symbols (a host build, or stripped): nothing was checked" >&2
    exit 2
  fi
  if (( constant_n + global_n > 0 )); then
    bad=1
    # The functor's type names the lambda (its enclosing function) to slim down.
    { grep -E 'cuda_parallel_launch_(constant|global)_memory' <<<"$kernels" || true; } | c++filt |
      cut -c1-400 | sed 's/^/  functor of 512 bytes or more: /'
  fi
done
if (( bad )); then
  echo "launch_check: a kernel above is launched through constant or global memory: its functor is 512 bytes" \
       "or more, which a CUDA graph cannot capture correctly; pass the large data by device pointer instead" >&2
  exit 1
fi
