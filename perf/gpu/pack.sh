#!/usr/bin/env bash
# perf/gpu/pack.sh — package a meshtrain build for a bare GPU machine (perf/gpu/validate.sh).
#
# The lent GPU machine has the NVIDIA driver, CUDA 13 (cuBLAS) and PyTorch (whose wheels
# bring NCCL), but no MPI, HDF5, Boost or OpenBLAS, and no network. This script copies the
# executables of a build together with every shared library they load that such a machine
# lacks into ONE compressed file, which the device call carries (it must stay well under the
# 64 MiB the call may carry, with the repository).
#
#   perf/gpu/pack.sh [--build DIR] [--out DIR]        (defaults: build/cuda, .gpu)
#
# Writes DIR/meshtrain-gpu.tar.xz (and DIR/MANIFEST.txt, the same list uncompressed).
# Inside, under meshtrain-gpu/:
#   bin/            meshtrain, selfcheck_paths (the fused paths against the paths they
#                   replace), test_cuda_link, the kernel tests, test_model_gradcheck,
#                   test_memory_accounting, test_memory_pool (stripped; device code kept)
#   lib/            every non-system shared library of those, by soname: Open MPI (libmpi,
#                   libopen-rte, libopen-pal, libpmix, hwloc, libevent), parallel HDF5 and its
#                   dependencies (libsz, libaec, libcurl and its TLS/Kerberos/LDAP stack),
#                   Boost.Program_options, the CUDA runtime (libcudart), and in host builds
#                   OpenBLAS and libgfortran
#   lib/fallback/   libstdc++, libgcc_s, libgomp: used there only when the machine's own are
#                   missing or too old (validate.sh decides), never in front of newer ones
#   glibc/          this machine's C library and dynamic loader: used there only when the
#                   machine's glibc is older than the build needs (validate.sh then starts
#                   every executable through the packed loader)
#   openmpi/        Open MPI's run-time plugins (shared-memory and self transports, collectives,
#                   MPI-IO, the singleton launcher), its help texts and site defaults
#   pmix/           PMIx's plugins
#   tools/          (only when $MESHTRAIN_KOKKOS_TOOLS names a folder holding them) Kokkos
#                   Tools' libkp_kernel_timer.so and kp_reader, for validate.sh's kernel profile
#   BUILD_INFO.txt  what was built, from which commit, with which compilers and libraries
# Left out on purpose: the NVIDIA driver's libcuda, which the machine has; cuBLAS/cuBLASLt
# (~600 MB), NCCL (~200 MB), cuDNN (~1 GB with the engine libraries it loads) and NVRTC
# (109 MB, cuDNN's run-time compiler), which are too large to carry
# and which the machine has (CUDA toolkit or the nvidia-* Python wheels; validate.sh finds
# them); Open MPI's network transports (UCX, libfabric, InfiniBand, PSM), which a one-node,
# one-rank run never loads (validate.sh pins pml=ob1, btl=self,vader).
#
# A CUDA build is packed only when every Kokkos kernel of meshtrain and the selfcheck takes
# its functor as its parameter, as CUDA graphs need (perf/gpu/launch_check.sh).
# A CPU build packs the same way (its tests and the dry run of validate.sh use that).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=build/cuda
out=.gpu
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "pack.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
cd "$repo"
[[ $build = /* ]] || build=$repo/$build
[[ $out = /* ]] || out=$repo/$out
[[ -x $build/bin/meshtrain ]] || { echo "pack.sh: $build/bin/meshtrain not found: build first (cmake --build $build --target gpu_validation)" >&2; exit 1; }

# Executables: the program; the tests that exercise device code on one rank: NCCL and
# cuBLAS against host references, every kernel against host references and finite
# differences, the whole model's gradients against finite differences (double), and one
# training step's memory accounting against the planner (FSDP engine, pool, NCCL); the
# pool's steady state (no allocator calls after the first training step). The CMake target
# gpu_validation (tests/CMakeLists.txt) builds exactly these: keep the two lists together.
bins=("$build/bin/meshtrain")
[[ -x $build/bin/selfcheck_paths ]] ||
  { echo "pack.sh: $build/bin/selfcheck_paths not found: build it (cmake --build $build --target gpu_validation)" >&2; exit 1; }
bins+=("$build/bin/selfcheck_paths")
for t in "$build"/bin/test_cuda_link "$build"/bin/test_kernels_* "$build"/bin/test_model_gradcheck \
         "$build"/bin/test_memory_accounting "$build"/bin/test_memory_pool; do
  [[ -x $t ]] && bins+=("$t")
done

# A CUDA build's step replays from a CUDA graph (gpu.graphs): every Kokkos kernel meshtrain
# and the selfcheck launch must take its functor as its parameter (perf/gpu/launch_check.sh
# says why). Checked here, on the unstripped executables; a host build has no such kernels.
if grep -q '^MESHTRAIN_ENABLE_CUDA:BOOL=ON$' "$build/CMakeCache.txt"; then
  perf/gpu/launch_check.sh "$build/bin/meshtrain" "$build/bin/selfcheck_paths" ||
    { echo "pack.sh: not packed: the kernels above cannot be captured into a CUDA graph correctly" >&2; exit 1; }
fi

stage_root=$(mktemp -d)
trap 'rm -rf "$stage_root"' EXIT
stage=$stage_root/meshtrain-gpu
mkdir -p "$stage"/{bin,lib/fallback,glibc,openmpi/lib,openmpi/share,openmpi/etc,pmix/lib}

for b in "${bins[@]}"; do
  cp "$b" "$stage/bin/"
  # --strip-unneeded keeps the .nv_fatbin device code (it is data, not symbols).
  strip --strip-unneeded "$stage/bin/$(basename "$b")"
done

# Open MPI plugins, minus the network transports and OpenSHMEM (never used here, and they
# would pull UCX, libfabric, verbs and PSM libraries along).
ompi_pkglibdir=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
ompi_pkgdatadir=$(ompi_info --path pkgdatadir --parsable | sed 's/^path:pkgdatadir://')
ompi_sysconfdir=$(ompi_info --path sysconfdir --parsable | sed 's/^path:sysconfdir://')
mkdir -p "$stage/openmpi/lib/openmpi3"
skip_re='ucx|ofi|openib|uct|usnic|psm|portals|verbs|_cm\.so|spml|sshmem|scoll|memheap|atomic_|_java|dbg_msgq'
for c in "$ompi_pkglibdir"/mca_*.so; do
  [[ $(basename "$c") =~ $skip_re ]] && continue
  cp -L "$c" "$stage/openmpi/lib/openmpi3/"
done
cp -rL "$ompi_pkgdatadir" "$stage/openmpi/share/"
[[ -f $ompi_sysconfdir/openmpi-mca-params.conf ]] && cp -L "$ompi_sysconfdir/openmpi-mca-params.conf" "$stage/openmpi/etc/"
# The shared-library closure of the executables and plugins.
system_re='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec)\.so'
# libnvrtc: cuDNN's run-time kernel compiler (linked through meshtrain_cudnn; test_cuda_link
# links it in host builds too): 109 MB unpacked, ~20 MB of xz, and in every CUDA toolkit and
# PyTorch's nvidia-cuda-nvrtc wheel, so the machine's copy is used, like cuBLAS'.
machine_re='^(libcuda|libnvidia-.*|libcublas|libcublasLt|libnccl|libcudnn|libnvrtc|libnvrtc-builtins)\.so'
fallback_re='^(libstdc\+\+|libgcc_s|libgomp)\.so'
declare -A seen=() origin=()
missing=()
closure() {
  local queue=("$@") obj name arrow path rest
  while [[ ${#queue[@]} -gt 0 ]]; do
    obj=${queue[0]}
    queue=("${queue[@]:1}")
    while read -r name arrow path rest; do
      [[ $arrow == "=>" ]] || continue
      [[ -n ${seen[$name]:-} ]] && continue
      seen[$name]=1
      if [[ $name =~ $system_re && $path == /* ]]; then cp -L "$path" "$stage/glibc/$name"; continue; fi
      if [[ $name =~ $system_re || $name =~ $machine_re ]]; then continue; fi
      if [[ $path == not ]]; then missing+=("$name (needed by $(basename "$obj"))"); continue; fi
      origin[$name]=$path
      if [[ $name =~ $fallback_re ]]; then
        cp -L "$path" "$stage/lib/fallback/$name"
      else
        cp -L "$path" "$stage/lib/$name"
        queue+=("$stage/lib/$name")
      fi
    done < <(ldd "$obj" 2>/dev/null || true)
  done
}
closure "$stage"/bin/* "$stage"/openmpi/lib/openmpi3/*.so
# PMIx plugins live beside the real libpmix (Debian: .../pmix2/lib/pmix), loaded by Open
# MPI's pmix component.
pmix_so=${origin[libpmix.so.2]:-}
if [[ -n $pmix_so ]]; then
  pmix_dir=$(dirname "$(readlink -f "$pmix_so")")/pmix
  if [[ -d $pmix_dir ]]; then
    cp -rL "$pmix_dir" "$stage/pmix/lib/"
    closure "$stage"/pmix/lib/pmix/*.so
  fi
fi
# Kokkos Tools' simple kernel timer (built outside the repository from
# github.com/kokkos/kokkos-tools): carried only when asked for, with its own libraries.
if [[ -n ${MESHTRAIN_KOKKOS_TOOLS:-} ]]; then
  # CMake names the timer libkp_kernel_timer.so, the tool's own Makefile kp_kernel_timer.so.
  kt=""
  for f in libkp_kernel_timer.so kp_kernel_timer.so; do
    [[ -z $kt && -f $MESHTRAIN_KOKKOS_TOOLS/$f ]] && kt=$MESHTRAIN_KOKKOS_TOOLS/$f
  done
  [[ -n $kt && -x $MESHTRAIN_KOKKOS_TOOLS/kp_reader ]] ||
    { echo "pack.sh: \$MESHTRAIN_KOKKOS_TOOLS=$MESHTRAIN_KOKKOS_TOOLS lacks (lib)kp_kernel_timer.so or kp_reader" >&2; exit 1; }
  mkdir -p "$stage/tools"
  cp -L "$kt" "$stage/tools/libkp_kernel_timer.so"
  cp -L "$MESHTRAIN_KOKKOS_TOOLS/kp_reader" "$stage/tools/"
  strip --strip-unneeded "$stage/tools/"*
  closure "$stage"/tools/*
fi
# The C library of this machine with its loader: validate.sh runs the executables through
# it only where the GPU machine's own glibc is older than the build needs.
interp=$(readelf -l "$stage/bin/meshtrain" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
cp -L "$interp" "$stage/glibc/$(basename "$interp")"
if [[ ${#missing[@]} -gt 0 ]]; then
  printf 'pack.sh: libraries not found here (fix the build machine first):\n' >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi

# What the machine must provide itself, for validate.sh to check before running.
glibc_max=$(for f in "$stage"/bin/* "$stage"/lib/*.so*; do objdump -T "$f" 2>/dev/null; done |
            grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
glibcxx_max=$(for f in "$stage"/bin/* "$stage"/lib/*.so*; do objdump -T "$f" 2>/dev/null; done |
              grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
machine_libs=$(for f in "$stage"/bin/* "$stage"/lib/*.so*; do ldd "$f" 2>/dev/null; done |
               awk '{print $1}' | { grep -E "$machine_re" || true; } | sort -u | tr '\n' ' ')  # none: empty, not an exit
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -1; }
{
  echo "meshtrain $(git -C "$repo" describe --always --dirty --tags 2>/dev/null || echo unknown)"
  echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  echo "build dir: $build ($(cache CMAKE_BUILD_TYPE))"
  echo "compiler: $(cache CMAKE_CXX_COMPILER)"
  echo "MESHTRAIN_ENABLE_CUDA: $(cache MESHTRAIN_ENABLE_CUDA)  MESHTRAIN_CUDA_ARCH: $(cache MESHTRAIN_CUDA_ARCH)"
  echo "Kokkos: $(cache Kokkos_DIR)"
  if command -v nvcc >/dev/null; then echo "nvcc: $(nvcc --version | tail -2 | head -1)"; fi
  echo "needs from the machine: glibc >= ${glibc_max#GLIBC_}, libstdc++ with ${glibcxx_max:-none} (else lib/fallback), $machine_libs"
  echo "GLIBCXX_REQUIRED=${glibcxx_max}"
  echo "GLIBC_PACKED=$(getconf GNU_LIBC_VERSION | awk '{print $2}') LOADER=$(basename "$interp")"
  echo "MACHINE_LIBS=$machine_libs"
  echo
  (cd "$stage" && find . -type f -printf '%10s  %P\n' | sort -k2)
} > "$stage/BUILD_INFO.txt"

mkdir -p "$out"
# MESHTRAIN_PACK_XZ_LEVEL: xz's preset (default 6; the suite's dry run packs with 0, fast).
tar -C "$stage_root" -cf - meshtrain-gpu | xz -T0 -"${MESHTRAIN_PACK_XZ_LEVEL:-6}" > "$out/meshtrain-gpu.tar.xz.tmp"
mv "$out/meshtrain-gpu.tar.xz.tmp" "$out/meshtrain-gpu.tar.xz"
cp "$stage/BUILD_INFO.txt" "$out/MANIFEST.txt"
size=$(stat -c %s "$out/meshtrain-gpu.tar.xz")
raw=$(du -sb "$stage" | cut -f1)
printf 'pack.sh: %s: %.1f MiB (%.1f MiB unpacked), %d executables, %d libraries, %d MPI plugins\n' \
  "$out/meshtrain-gpu.tar.xz" "$(echo "$size / 1048576" | bc -l)" "$(echo "$raw / 1048576" | bc -l)" \
  "$(ls "$stage/bin" | wc -l)" "$(ls "$stage/lib" "$stage/lib/fallback" | grep -c '\.so')" \
  "$(ls "$stage/openmpi/lib/openmpi3" | wc -l)"
if (( size > 48 * 1048576 )); then
  echo "pack.sh: the package is over 48 MiB: with the repository it may not fit the 64 MiB a device call carries" >&2
  exit 1
fi
