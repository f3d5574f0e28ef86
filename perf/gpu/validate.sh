#!/usr/bin/env bash
# perf/gpu/validate.sh — one command that validates meshtrain on a lent GPU machine.
#
# It runs a meshtrain CUDA build that was compiled elsewhere and packed by perf/gpu/pack.sh
# (the GPU machine has CUDA 13, cuBLAS, NCCL via PyTorch's wheels and python3, but no MPI,
# HDF5, Boost, network or package manager, and too little time to compile: the CUDA build
# takes over an hour of nvcc on 2 cores, several minutes on 16):
#
#   1. unpacks the package and sets up the environment: its libraries, Open MPI's plugins
#      for a singleton MPI_Init (no mpirun, no orted), cuBLAS/NCCL/cuDNN/NVRTC found on the
#      machine;
#   2. (a) runs the self-check of the fused paths (selfcheck_paths: each against the path it
#      replaces and a double reference, one PASS/FAIL line per path, results.json "paths");
#      every meshtrain run after it turns off, by its gpu.* key, each path that did not pass
#      (perf/gpu/fallback.py; fallback.txt, results.json "fallback"), so that one failing
#      path does not cost the call its measurements (the verdict stays FAIL);
#      then the kernel tests (every Kokkos kernel against a host reference in double, and
#      backward kernels against finite differences) and the NCCL/cuBLAS test on the GPU;
#   3. measures the cuBLAS bf16 GEMM peak with `meshtrain bench gemm` (the MFU denominator);
#   4. (b) compute-sanitizer --tool memcheck on a 2-step run of inputs/tiny-gpt2.ini (SKIP,
#      with the reason, in a host build or without compute-sanitizer or a GPU);
#   5. (c) trains, --steps steps each (default 20), bf16 on random tokens, 1 GPU, NCCL
#      backend: gpt2-124m-mb16 and gpt2-124m-mb32 (inputs/gpt2-124m.ini at micro-batch 16
#      and 32 x 1024) and smollm2-135m (inputs/smollm2-135m.ini: 8 x 2048, one micro-batch
#      per step); each loss curve is compared with the CPU fp32 reference of the same run in
#      perf/results/gpu/reference/<run>.json within 1e-2 relative (SKIP where none exists;
#      the dry run makes its own by training the tiny run again in fp32); after each run,
#      `meshtrain plan` of the same run measures this machine and predicts its step
#      (train/<run>/plan.json: the table sets it beside the measured step);
#   6. (d) the PyTorch peer perf/peer/torch_gpu.py trains the same shapes, eager (SDPA flash
#      attention, fused AdamW, bf16 autocast) then torch.compile, in one process per mode;
#   7. (e) a per-kernel profile: Kokkos Tools' simple kernel timer (package tools/ or
#      $MESHTRAIN_KOKKOS_TOOLS) on 6 steps of gpt2-124m-mb16, kp_reader's table parsed into
#      results.json "kernel_profile" (SKIP, with the reason, when the timer is absent); a
#      loaded Kokkos Tools library fences around every kernel, so these steps run without
#      CUDA graphs (the trainer says so), while the runs of step 5 replay theirs (gpu.graphs);
#   8. prints ONE table (summarize.py): paths, tests, GEMM peak, the headline run (tokens/s,
#      MFU, memory, loss curve), then per shape meshtrain / eager / compile tokens/s and
#      memory, the ratios meshtrain/eager and meshtrain/compile, the loss check, the
#      sanitizer's verdict, the top kernels, and the verdict.
#
# Back of the envelope (inputs/gpt2-124m.ini): 0.854 GFLOP per token with backward, 16384
# tokens per step = 14.0 TFLOP per step; at a ~750 TFLOP/s bf16 GEMM peak that is 19 ms,
# plus ~10 ms of memory-bound kernels: ~30 ms per step (~550 k tokens/s) is the floor.
# Budget: 530 s in all (see `budget` below for each phase's share); torch.compile of GPT-2
# takes ~1 min per shape, so when time runs short the later compile shapes are SKIP.
#
# Usage (the device call runs it as root from the repository root, $OUT set):
#   perf/gpu/validate.sh [--pack FILE] [--steps N] [--work DIR]
#   perf/gpu/validate.sh --dry-run --pack /tmp/cpu-pack/meshtrain-gpu.tar.xz [--isolate]
#     --dry-run: the same steps with a CPU build's package (perf/gpu/pack.sh --build
#                build/cpu --out DIR), a tiny model and small GEMMs: checks the script here.
#     --isolate: (root) re-runs itself in a private mount namespace in which every system
#                copy of a library the package carries, Open MPI's and PMIx's plugin
#                folders and the MPI launchers are hidden: proves the package is complete.
#   perf/gpu/validate.sh --from-source [...]
#     --from-source: no package: build the executables from this checkout on the machine
#                (needs MPI, parallel HDF5, Boost, GoogleTest, CUDA and $Kokkos_ROOT there;
#                the lent GPU machines lack the first four, so there the package is the way).
#                Also what happens when the package file is absent.
#   perf/gpu/validate.sh --check-pack [--isolate]     (here, with the CUDA package)
#     --check-pack: only unpack, set up the environment and start `meshtrain --version`;
#                without a GPU it must stop with "no CUDA device is usable", never with a
#                missing library (the driver's libcuda is replaced by the toolkit's stub).
#
#   Environment: MESHTRAIN_PEER_PYTHON (the peer's python; python3, in a dry run
#   /usr/bin/python3), MESHTRAIN_KOKKOS_TOOLS (a folder with (lib)kp_kernel_timer.so and
#   kp_reader, when the package has no tools/), MESHTRAIN_EXTRA_ARGS (config keys added to
#   every meshtrain train/plan run, the sanitizer's and the profile's included: a fallback
#   without repacking, e.g. MESHTRAIN_EXTRA_ARGS="--gpu.norm_form=rows" when a path FAILs;
#   a key it sets is not added again by the automatic fallbacks), MESHTRAIN_AUTO_FALLBACK=0
#   (run every path as built even when the self-check failed it), MESHTRAIN_TEST_JOBS (test
#   programs run at once, default 4).
#
# Results: $OUT (default runs/gpu-validate) gets validate.log, table.txt, results.json,
# metrics.jsonl and train.log of the headline run (gpt2-124m-mb16), and details.tar.gz
# (test XML/logs, GEMM JSON, every run's folder with its memory samples, config and summary,
# the peers' JSON and logs, the sanitizer's and kernel timer's output, BUILD_INFO). Exit
# status 0 when every path and test passed, every run finished with finite losses within
# the reference's tolerance (where one exists), and nothing (sanitizer, peer, profile) FAILed.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pack=$repo/.gpu/meshtrain-gpu.tar.xz
steps=20
work=${TMPDIR:-/tmp}/meshtrain-validate
dry_run=0
isolate=0
check_pack=0
from_source=0
args=("$@")
while [[ $# -gt 0 ]]; do
  case $1 in
    --pack) pack=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --isolate) isolate=1; shift ;;
    --check-pack) check_pack=1; shift ;;
    --from-source) from_source=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "validate.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
out=${OUT:-$repo/runs/gpu-validate}
[[ $pack = /* ]] || pack=$PWD/$pack
cd "$repo"

# ---- --isolate: hide the system's copies of what the package carries --------------------
if [[ $isolate == 1 && -z ${MESHTRAIN_VALIDATE_ISOLATED:-} ]]; then
  [[ $(id -u) == 0 ]] || { echo "validate.sh: --isolate needs root (mount namespaces)" >&2; exit 2; }
  list=$(mktemp)
  # Libraries by soname (their system copies get /dev/null bound over them), then the plugin
  # and configuration folders of Open MPI and PMIx (an empty tmpfs over each), then the MPI
  # launchers (a singleton must not need them). Paths are found before anything is hidden.
  # A library the machine's own tools load (grep and mount load libpcre2-8, which meshtrain's
  # tokenizer also links; python3 libz) stays visible: the machine has it, and hiding it
  # would break the script, not test the package.
  own=$(for t in bash grep sed awk tar xz mount unshare python3 /usr/bin/python3 ${MESHTRAIN_PEER_PYTHON:-} ldconfig nvidia-smi; do
          p=$(command -v "$t") && ldd "$p" 2>/dev/null; done | awk '{print $1}' | sort -u)
  tar -tJf "$pack" | sed -n 's|^meshtrain-gpu/lib/\([^/]*\.so[^/]*\)$|\1|p' |
    while read -r l; do
      if grep -qxF "$l" <<< "$own"; then echo "keep $l"; else echo "lib $l"; fi
    done > "$list"
  for k in pkglibdir pkgdatadir sysconfdir; do
    echo "dir $(ompi_info --path $k --parsable | cut -d: -f3)" >> "$list"
  done
  echo "dir /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix" >> "$list"
  for b in orted orterun mpirun mpiexec; do
    p=$(command -v $b) && echo "file $(readlink -f "$p")" >> "$list"
  done
  exec env MESHTRAIN_VALIDATE_ISOLATED=1 unshare -m --propagation private bash -c '
    set -e
    entries=$(cat "$1") && rm -f "$1"  # the list (mktemp), read before anything is hidden
    while read -r kind what; do
      case $kind in
        lib) for p in $(ldconfig -p | awk -v n="$what" "\$1 == n {print \$NF}"); do
               mount --bind /dev/null "$(readlink -f "$p")"
             done ;;
        dir) [ -d "$what" ] && mount -t tmpfs none "$what" ;;
        file) mount --bind /dev/null "$what" ;;
        keep) ;;
      esac
    done <<< "$entries"
    echo "[validate] isolated: $(grep -c "^lib" <<< "$entries") system libraries and Open MPI/PMIx plugins hidden;" \
         "kept (the machine'"'"'s own tools load them): $(sed -n "s/^keep //p" <<< "$entries" | tr "\n" " ")"
    shift
    exec bash "$@"' isolate "$list" "$repo/perf/gpu/validate.sh" "${args[@]}"
fi

t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }
# The whole run must end inside 9 minutes: each phase's time limit is what is left of a
# 530 s budget minus what the later phases need (on an H200, expected: self-check ~0.5 min,
# tests ~0.5-1 min (4 programs at once), GEMM ~0.5 min, compute-sanitizer ~0.5 min, three
# training runs ~1.5 min, PyTorch eager ~1 min, torch.compile ~1 min per shape, kernel
# profile ~0.5 min). The reserves: the tests start only with 380 s left, the sanitizer
# needs 330 s left after it, each training run 230 s, eager 190 s, compile 35 s (the
# profile's).
budget=530
[[ $dry_run == 1 ]] && budget=3600  # 2 shared cores here, not 16
left() { echo $(( budget - $(elapsed) - $1 )); }
say() { printf '[validate %4ss] %s\n' "$(elapsed)" "$*"; }
fail=0

main() {
  mkdir -p "$work/tests" "$work/train"
  say "meshtrain GPU validation: pack $pack, runs ${RUNS[*]}, $steps steps each$([[ $dry_run == 1 ]] && echo ', DRY RUN (CPU build)')"
  [[ -n ${MESHTRAIN_EXTRA_ARGS:-} ]] && say "every meshtrain run also gets: $MESHTRAIN_EXTRA_ARGS (MESHTRAIN_EXTRA_ARGS)"

  # ---- 1. unpack and environment (or build from the sources) -----------------------------
  if [[ -f $pack && $from_source == 0 ]]; then
    tar -C "$work" -xJf "$pack" || { say "FATAL: could not unpack $pack"; return 1; }
    P=$work/meshtrain-gpu
    cp "$P/BUILD_INFO.txt" "$work/"
    say "package: $(head -1 "$P/BUILD_INFO.txt"), $(sed -n 2p "$P/BUILD_INFO.txt")"
    setup_environment || return 1
  else
    [[ $from_source == 1 ]] || say "no package at $pack: building from the repository's sources instead"
    build_from_source || return 1
  fi
  M=$P/bin/meshtrain
  if [[ $check_pack == 1 ]]; then
    local text rc
    text=$(timeout 60 "${RUN[@]}" "$M" --version 2>&1)
    rc=$?
    echo "$text" | sed 's/^/    /'
    if echo "$text" | grep -q "error while loading shared libraries"; then
      say "check-pack: FAIL (a library is missing)"; return 1
    elif [[ $rc == 0 ]] || echo "$text" | grep -q "no CUDA device is usable"; then
      say "check-pack: OK (all libraries load; status $rc)"; return 0
    fi
    say "check-pack: FAIL (status $rc)"; return 1
  fi

  # ---- 2. machine, version ---------------------------------------------------------------
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit,temperature.gpu \
      --format=csv > "$work/nvidia-smi.csv" 2>&1
    say "GPU: $(sed -n 2p "$work/nvidia-smi.csv")"
  elif [[ $dry_run == 0 ]]; then
    say "WARNING: nvidia-smi not found"
  fi
  timeout 60 "${RUN[@]}" "$M" --version > "$work/version.txt" 2>&1
  local rc=$?
  sed 's/^/    /' "$work/version.txt"
  if [[ $rc != 0 ]]; then say "FATAL: meshtrain --version failed (status $rc)"; return 1; fi

  # ---- 3a. self-check of the fused paths ---------------------------------------------------
  # Every fused path against the path it replaces and a double reference on random inputs,
  # one PASS/FAIL line each; a failing path does not stop the others (nor this script: the
  # training below shows what the rest of the build does; gpu.* keys turn a path off).
  local limit
  if [[ -x $P/bin/selfcheck_paths ]]; then
    limit=$(left 420)
    (( limit > 120 )) && limit=120
    (( limit < 20 )) && limit=20
    timeout "$limit" "${RUN[@]}" "$P/bin/selfcheck_paths" --json "$work/selfcheck.json" > "$work/selfcheck.txt" 2>&1
    rc=$?
    echo "$rc" > "$work/selfcheck_status.txt"
    grep -E "^(PASS|FAIL|SKIP) |^selfcheck_paths:" "$work/selfcheck.txt" | sed 's/^/    /'
    say "$(printf '%-28s %s' selfcheck_paths "$([[ $rc == 0 ]] && echo "every path in the build PASS" || echo "FAILED (exit $rc; see the FAIL lines)")")"
    [[ $rc == 0 ]] || fail=1
  else
    say "selfcheck_paths: NOT IN THE PACKAGE (pack.sh packs it; rebuild and repack)"
    echo 127 > "$work/selfcheck_status.txt"
    fail=1
  fi
  select_fallbacks

  # ---- 3b. tests -------------------------------------------------------------------------
  # Correctness only (no test times anything), so up to $MESHTRAIN_TEST_JOBS programs share
  # the GPU at once (default 4; each has its own CUDA context) and the budget keeps more time
  # for the measurements. Each gets the same time limit; their lines come out in order.
  local t name jobs=${MESHTRAIN_TEST_JOBS:-4}
  limit=$(left 380)
  (( limit > 120 )) && limit=120
  for t in "$P"/bin/test_*; do
    name=$(basename "$t")
    rm -f "$work/tests/$name.rc"
    (( limit < 20 )) && continue
    while (( $(jobs -rp | wc -l) >= jobs )); do wait -n; done
    { timeout "$limit" "${RUN[@]}" "$t" --gtest_output="xml:$work/tests/$name.xml" > "$work/tests/$name.log" 2>&1
      echo $? > "$work/tests/$name.rc"; } &
  done
  wait
  for t in "$P"/bin/test_*; do
    name=$(basename "$t")
    if [[ ! -f $work/tests/$name.rc ]]; then
      say "$(printf '%-28s %s' "$name" "NOT RUN (time budget spent)")"
      echo "$name 125" >> "$work/tests/status.txt"
      fail=1
      continue
    fi
    rc=$(cat "$work/tests/$name.rc")
    echo "$name $rc" >> "$work/tests/status.txt"
    say "$(printf '%-28s %s' "$name" "$(test_verdict "$rc" "$work/tests/$name.log")")"
    # A dry run has no GPU: a program that needs one skips (77), which is reported as such
    # and not counted as a failure there; on the device every skip is a failure.
    [[ $rc == 0 || ( $dry_run == 1 && $rc == 77 ) ]] || fail=1
  done

  # ---- 4. GEMM peak ----------------------------------------------------------------------
  local sizes="4096,8192,16384" seconds=1.5
  [[ $dry_run == 1 ]] && { sizes="256,512"; seconds=0.3; }
  say "GEMM peak: meshtrain bench gemm --dtype bf16 --sizes $sizes"
  timeout 60 "${RUN[@]}" "$M" bench gemm --dtype bf16 --sizes "$sizes" --seconds "$seconds" --json "$work/gemm_bf16.json" \
    > "$work/gemm_bf16.txt" 2>&1 || say "WARNING: bench gemm bf16 failed (status $?)"
  sed 's/^/    /' "$work/gemm_bf16.txt"
  timeout 40 "${RUN[@]}" "$M" bench gemm --dtype fp32 --sizes "${sizes##*,}" --seconds "$seconds" --json "$work/gemm_fp32.json" \
    > "$work/gemm_fp32.txt" 2>&1 || say "WARNING: bench gemm fp32 failed (status $?)"
  sed 's/^/    /' "$work/gemm_fp32.txt"
  if [[ $dry_run == 0 ]] && (( $(left 330) > 30 )); then torch_gemm_check; fi
  local peak_tflops
  peak_tflops=$(python3 - "$work/gemm_bf16.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["results"]
    print("%.3f" % (max(x["best_flops_min"] for x in r) / 1e12))
except Exception:
    print("0")
EOF
)
  say "measured bf16 GEMM peak: $peak_tflops TFLOP/s (MFU denominator)"

  # ---- 5. compute-sanitizer on one short step (b) -------------------------------------------
  sanitizer_step "$peak_tflops"

  # ---- 6. training: GPT-2 124M at micro-batch 16 and 32, the SmolLM2-135M-shaped Llama (c) --
  # Each run gets its own folder under train/ (train/runs.txt lists them in order); the first
  # is the headline (results.json "train"). The loss curves are compared with a CPU fp32
  # reference of the same run where one exists (summarize.py; the dry run makes its own).
  local run
  : > "$work/train/runs.txt"
  for run in "${RUNS[@]}"; do
    train_run "$run" "$peak_tflops"
  done

  # ---- 7. the PyTorch peers of the same shapes, eager then torch.compile (d) ---------------
  peer_runs eager
  peer_runs compile

  # ---- 8. per-kernel profile: Kokkos Tools' simple kernel timer on a short run (e) ----------
  kernel_profile "$peak_tflops"
  return 0
}

# Without a package: configure and build the executables from this checkout with the
# machine's own MPI, parallel HDF5, Boost, GoogleTest and CUDA toolkit, and a Kokkos-CUDA
# install at $Kokkos_ROOT (or .gpu/kokkos-cuda). That is a GPU node with the dependencies
# (a Spack environment, say); the lent GPU machines have none of them, so there configure
# stops at the first one missing and says which. ~25 CPU-minutes of nvcc: ~2-3 minutes on
# 16 cores, counted against the same 530 s budget. The dry run builds the cpu preset.
build_from_source() {
  local preset=cuda
  [[ $dry_run == 1 ]] && preset=cpu
  if [[ $preset == cuda ]]; then
    if [[ -z ${Kokkos_ROOT:-} && -d $repo/.gpu/kokkos-cuda ]]; then export Kokkos_ROOT=$repo/.gpu/kokkos-cuda; fi
    [[ -n ${Kokkos_ROOT:-} ]] || { say "FATAL: no package and no Kokkos_ROOT (a Kokkos built with CUDA) to build with"; return 1; }
    command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  fi
  local b=$work/build targets=(meshtrain selfcheck_paths test_cuda_link test_model_gradcheck test_memory_accounting test_memory_pool)
  local k
  for k in elementwise gemm_epilogue gemm_mixed embedding norms rope attention sdpa_layout sdpa_ragged cross_entropy adamw preference; do targets+=("test_kernels_$k"); done
  say "building from source: cmake --preset $preset -B $b (Kokkos_ROOT=${Kokkos_ROOT:-})"
  if ! cmake --preset "$preset" -B "$b" > "$work/build-configure.log" 2>&1; then
    say "FATAL: configure failed; the end of its log:"; tail -15 "$work/build-configure.log" | sed 's/^/    /'; return 1
  fi
  local limit
  limit=$(left 200)
  (( limit < 60 )) && limit=60
  if ! timeout "$limit" cmake --build "$b" -j "$(nproc)" --target "${targets[@]}" > "$work/build.log" 2>&1; then
    say "FATAL: the build failed or ran out of time; the end of its log:"; tail -15 "$work/build.log" | sed 's/^/    /'; return 1
  fi
  P=$work/from-source
  mkdir -p "$P/bin"
  for k in "${targets[@]}"; do [[ -x $b/bin/$k ]] && ln -sf "$b/bin/$k" "$P/bin/$k"; done
  {
    echo "meshtrain $(git -C "$repo" describe --always --dirty --tags 2>/dev/null || echo unknown) (built from source on this machine)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), preset $preset"
  } > "$P/BUILD_INFO.txt"
  cp "$P/BUILD_INFO.txt" "$work/"
  say "built in $(elapsed) s"
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} OMP_PROC_BIND=false OPENBLAS_NUM_THREADS=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # singletons: see setup_environment
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
}

# The gpu.* keys that turn off every fused path the self-check did not pass
# (perf/gpu/fallback.py), for every meshtrain run after it: training, plan, the sanitizer's
# and the profile's. Off with MESHTRAIN_AUTO_FALLBACK=0; a key that MESHTRAIN_EXTRA_ARGS
# sets is left to it (a key given twice is an error). fallback.txt: "key=value<TAB>why".
AUTO_ARGS=()
select_fallbacks() {
  AUTO_ARGS=()
  : > "$work/fallback.txt"
  if [[ ${MESHTRAIN_AUTO_FALLBACK:-1} == 0 ]]; then
    say "fallbacks: none added (MESHTRAIN_AUTO_FALLBACK=0): every path runs as built"; return
  fi
  python3 "$repo/perf/gpu/fallback.py" "$work/selfcheck.txt" "$(cat "$work/selfcheck_status.txt")" \
    > "$work/fallback.txt" 2> "$work/fallback.log" || say "WARNING: perf/gpu/fallback.py failed (status $?)"
  sed 's/^/    /' "$work/fallback.log"
  local key why
  while IFS=$'\t' read -r key why; do
    [[ -n $key ]] || continue
    if [[ " ${MESHTRAIN_EXTRA_ARGS:-} " == *" --${key%%=*}="* ]]; then
      say "fallback --$key ($why): not added, MESHTRAIN_EXTRA_ARGS sets ${key%%=*}"
      continue
    fi
    AUTO_ARGS+=("--$key")
    say "fallback: every meshtrain run below gets --$key ($why)"
  done < "$work/fallback.txt"
}

# Library search path: the package, then cuBLAS/NCCL wherever the machine has them, then
# the fallback C++ runtime only for what the machine lacks. Open MPI and PMIx are pointed at
# their relocated plugins and help files; a singleton MPI_Init starts no daemon.
setup_environment() {
  local ld=$P/lib
  local info=$P/BUILD_INFO.txt
  local need_glibc have_glibc
  need_glibc=$(sed -n 's/.*glibc >= \([0-9.]*\).*/\1/p' "$info")
  have_glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
  local loader
  loader=$P/glibc/$(sed -n 's/.* LOADER=\(.*\)/\1/p' "$info")
  if [[ ${MESHTRAIN_VALIDATE_PACKED_GLIBC:-0} == 1 ]] ||
     { [[ -n $need_glibc ]] && [[ $(printf '%s\n%s\n' "$need_glibc" "$have_glibc" | sort -V | head -1) != "$need_glibc" ]]; }; then
    if [[ ! -x $loader ]]; then
      say "FATAL: the package needs glibc >= $need_glibc, this machine has $have_glibc, and no packed C library"
      return 1
    fi
    # Every executable starts through the packed loader with the packed C library first;
    # the machine's libraries (driver, cuBLAS, NCCL) are older-glibc builds and load fine.
    use_loader=$loader
    say "running every executable through the packed glibc $(sed -n 's/^GLIBC_PACKED=\([^ ]*\).*/\1/p' "$info") (the build needs >= $need_glibc; this machine has $have_glibc)"
  fi
  # C++ runtime: the machine's own unless missing or older than the build needs.
  local glibcxx f name sys
  glibcxx=$(sed -n 's/^GLIBCXX_REQUIRED=//p' "$info")
  mkdir -p "$work/fallback"
  for f in "$P"/lib/fallback/*; do
    name=$(basename "$f")
    sys=$(ldconfig -p | awk -v n="$name" '$1 == n && /x86-64/ {print $NF; exit}')
    if [[ -z $sys ]] || { [[ $name == libstdc++* && -n $glibcxx ]] && ! grep -aq "$glibcxx" "$sys"; }; then
      ln -sf "$f" "$work/fallback/$name"
      say "using the packaged $name (the machine's is ${sys:-missing})"
    fi
  done
  [[ -n $(ls "$work/fallback") ]] && ld=$ld:$work/fallback
  # cuBLAS, cuBLASLt, NCCL, cuDNN: the CUDA toolkit, the system, or the nvidia-* wheels of PyTorch
  # (cuDNN loads its engine libraries from the directory it is found in, now on LD_LIBRARY_PATH).
  local dirs=() d lib found
  local IFS_=$IFS
  IFS=: read -r -a d <<< "${LD_LIBRARY_PATH:-}"
  IFS=$IFS_
  for d in "${d[@]}" /usr/local/nvidia/lib64 /usr/local/nvidia/lib ${CUDA_HOME:+$CUDA_HOME/lib64} \
           /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib64; do
    [[ -n $d && -d $d ]] && dirs+=("$d")
  done
  if command -v python3 >/dev/null; then
    while read -r d; do dirs+=("$d"); done < <(python3 - <<'EOF' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for p in sorted(glob.glob(os.path.join(r, "nvidia", "**", "lib"), recursive=True)):
        print(p)
EOF
)
  fi
  for lib in $(sed -n 's/^MACHINE_LIBS=//p' "$info"); do
    found=""
    if ldconfig -p | awk -v n="$lib" '$1 == n' | grep -q .; then found=system; fi
    for d in "${dirs[@]}"; do
      [[ -n $found ]] && break
      if [[ -e $d/$lib ]]; then found=$d; ld=$ld:$d; fi
    done
    if [[ -z $found && $check_pack == 1 && $lib == libcuda.so.1 && -e /usr/local/cuda/lib64/stubs/libcuda.so ]]; then
      mkdir -p "$work/stub" && ln -sf /usr/local/cuda/lib64/stubs/libcuda.so "$work/stub/libcuda.so.1"
      found="$work/stub (the toolkit's stub: no driver here)"; ld=$ld:$work/stub
    fi
    say "$lib: ${found:-NOT FOUND}"
    [[ -n $found ]] || { say "FATAL: $lib is not on this machine (searched: system, ${dirs[*]})"; return 1; }
  done
  # The search path is given to the packed executables only (RUN), never exported: the
  # machine's own programs (python3, nvidia-smi, tar) must keep their own libraries.
  local path=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [[ -n $use_loader ]]; then
    path=$P/glibc:$path
    RUN=("$use_loader" --library-path "$path")
  else
    RUN=(env "LD_LIBRARY_PATH=$path")
  fi
  export OPAL_PKGLIBDIR=$P/openmpi/lib/openmpi3 OPAL_PKGDATADIR=$P/openmpi/share/openmpi
  export OPAL_SYSCONFDIR=$P/openmpi/etc
  export OMPI_MCA_mca_base_component_path=$P/openmpi/lib/openmpi3
  # Every packed program starts through meshtrain's Runtime, which makes itself an isolated
  # singleton (no daemon) with a session directory of its own (doc/running.md). Exporting
  # OMPI_MCA_ess_singleton_isolated here would turn that off: the programs would share one
  # job id's directory, and one that ends removes it while another makes its own inside
  # (orte_session_dir failed in test_cuda_link, with two test programs at a time).
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export PMIX_INSTALL_PREFIX=$P/pmix PMIX_MCA_mca_base_component_path=$P/pmix/lib/pmix
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} OMP_PROC_BIND=false OPENBLAS_NUM_THREADS=1
  export HDF5_USE_FILE_LOCKING=FALSE
  # One process, one GPU: NCCL's bootstrap needs no network beyond loopback, and there is
  # no InfiniBand; warnings (not the info flood) reach the log.
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  local missing
  if [[ -n $use_loader ]]; then
    missing=$(for f in "$P"/bin/*; do "${RUN[@]}" --list "$f"; done | grep "not found" | sort -u)
  else
    missing=$(for f in "$P"/bin/*; do LD_LIBRARY_PATH=$path ldd "$f"; done | grep "not found" | sort -u)
  fi
  if [[ -n $missing ]]; then
    say "FATAL: libraries missing on this machine:"
    echo "$missing" | sed 's/^/    /'
    return 1
  fi
  say "library path of the packed executables: $path"
}

# Prefix of every packed executable's command line: empty, or the packed loader when the
# machine's glibc is too old (set by setup_environment).
use_loader=""
RUN=()

# "passed (12 tests)", "FAILED (2 of 12 tests)", "skipped (...)", "exit 134".
test_verdict() {
  local rc=$1 logf=$2 n
  n=$(sed -n 's/.*\[==========\] \([0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$logf" | tail -1)
  if [[ $rc == 0 ]]; then
    if grep -q '\[  SKIPPED \]' "$logf"; then
      echo "passed (${n:-?} tests, $(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\},.*/\1/p' "$logf") skipped)"
    else
      echo "passed (${n:-?} tests)"
    fi
  elif [[ $rc == 124 ]]; then
    echo "TIMED OUT"
  elif [[ $rc == 77 ]]; then
    echo "SKIPPED (exit 77: $(grep -m1 -iE 'skip|no (cuda|gpu)' "$logf" | tr -d '\r' | cut -c1-120))"
  else
    echo "FAILED (exit $rc; $(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\},.*/\1/p' "$logf") failed of ${n:-?}): $(grep -m3 -E 'Failure|error|FAILED|Aborted' "$logf" | tr '\n' ' ' | cut -c1-300)"
  fi
}

# Cross-check of the cuBLAS peak on random data through PyTorch (its cuBLAS, not ours).
torch_gemm_check() {
  timeout 90 python3 - > "$work/torch_gemm.txt" 2>&1 <<'EOF'
import torch
if not torch.cuda.is_available():
    raise SystemExit("torch: no CUDA")
n = 8192
xs = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
for i in range(10):
    xs[i % 2] @ xs[2 + i % 2]
torch.cuda.synchronize()
times = []
for i in range(50):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); xs[i % 2] @ xs[2 + i % 2]; e.record(); e.synchronize()
    times.append(s.elapsed_time(e) * 1e-3)
times.sort()
print("torch %s bf16 %dx%dx%d random data: median %.1f TFLOP/s, best %.1f TFLOP/s" %
      (torch.__version__, n, n, n, 2 * n**3 / times[len(times) // 2] / 1e12, 2 * n**3 / times[0] / 1e12))
EOF
  sed 's/^/    /' "$work/torch_gemm.txt"
}

# ---- the runs of steps 6-8 ------------------------------------------------------------------
# One name per model shape, trained by meshtrain (step 6) and by the PyTorch peer (step 7)
# with the same keys: the ini's model, micro-batch and sequence length as given here (shape
# keys: train.micro_batch and train.seq_len, every other one model.*). The dry run swaps in
# a tiny shape of the same family (2 CPU cores); the batch ratio of the two GPT-2 runs stays.
RUNS=(gpt2-124m-mb16 gpt2-124m-mb32 smollm2-135m)
declare -A RUN_INI=([gpt2-124m-mb16]=inputs/gpt2-124m.ini [gpt2-124m-mb32]=inputs/gpt2-124m.ini
                    [smollm2-135m]=inputs/smollm2-135m.ini)
declare -A RUN_SHAPE=([gpt2-124m-mb16]="micro_batch=16" [gpt2-124m-mb32]="micro_batch=32"
                      [smollm2-135m]="micro_batch=8 seq_len=2048")
tiny_gpt2="vocab_size=1000 d_model=64 n_layers=2 n_heads=4 max_seq_len=64 seq_len=64"
declare -A RUN_TINY=([gpt2-124m-mb16]="$tiny_gpt2 micro_batch=2" [gpt2-124m-mb32]="$tiny_gpt2 micro_batch=4"
                     [smollm2-135m]="vocab_size=1000 d_model=64 n_layers=2 n_heads=4 n_kv_heads=2 ffn_dim=128 max_seq_len=64 seq_len=64 micro_batch=2")

run_shape() { if [[ $dry_run == 1 ]]; then echo "${RUN_TINY[$1]}"; else echo "${RUN_SHAPE[$1]}"; fi; }

# meshtrain's command-line overrides for run $1 (shape keys, then what every run shares).
# The Llama ini is a pre-training recipe (global batch 256, 1000 warm-up steps, evaluation
# every 1000): here it is one micro-batch per step, 5 warm-up steps and the end-of-run
# evaluation, as inputs/gpt2-124m.ini.
meshtrain_overrides() {
  local name=$1 kv mb=""
  for kv in $(run_shape "$name"); do
    case ${kv%%=*} in
      micro_batch) mb=${kv#*=}; echo "--train.$kv" ;;
      seq_len) echo "--train.$kv" ;;
      *) echo "--model.$kv" ;;
    esac
  done
  [[ $name == smollm2-* ]] && echo "--train.global_batch=$mb --train.warmup_steps=5 --train.eval_every=0"
  if [[ $dry_run == 1 ]]; then echo "--parallel.backend=auto"; else echo "--parallel.backend=nccl"; fi
  if [[ ${#AUTO_ARGS[@]} -gt 0 ]]; then printf '%s\n' "${AUTO_ARGS[@]}"; fi
  if [[ -n ${MESHTRAIN_EXTRA_ARGS:-} ]]; then echo "$MESHTRAIN_EXTRA_ARGS"; fi
}

# nvidia-smi memory samples every 200 ms into $1 while a run lasts (pid in $sampler).
sampler=""
start_sampler() {
  sampler=""
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -lms 200 > "$1" 2>/dev/null &
    sampler=$!
  fi
}
stop_sampler() { [[ -n $sampler ]] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null; sampler=""; }

# Step 6, one run: $1 name, $2 the measured peak. Leaves train/$1/{train.log,metrics.jsonl,
# status.txt,gpu_memory.csv}; the dry run also trains the same run in fp32 (the CPU fp32
# reference the device run is compared with from perf/results/gpu/reference/).
train_run() {
  local name=$1 peak=$2 d=$work/train/$1 limit rc
  mkdir -p "$d"
  echo "$name" >> "$work/train/runs.txt"
  local overrides=(--train.steps="$steps" --checkpoint.save_final=false --train.log_every=1
                   $(meshtrain_overrides "$name"))
  [[ $peak != 0 ]] && overrides+=(--train.peak_tflops="$peak")
  limit=$(left 230)
  (( limit > 150 )) && limit=150
  if (( limit < 40 )); then
    say "training $name: NOT RUN (time budget spent)"; echo 125 > "$d/status.txt"; return
  fi
  say "training $name: meshtrain train ${RUN_INI[$name]} --output.dir=$d ${overrides[*]}"
  start_sampler "$d/gpu_memory.csv"
  timeout "$limit" "${RUN[@]}" "$M" train "${RUN_INI[$name]}" --output.dir="$d" "${overrides[@]}" > "$d/train.log" 2>&1
  rc=$?
  stop_sampler
  echo "$rc" > "$d/status.txt"
  grep -E "measured GEMM peak|mesh |strategy|step +[0-9]+/|per-rank|rank +0 " "$d/train.log" | sed 's/^/    /' | tail -8
  # Whether the steps were replayed from a CUDA graph (gpu.graphs, on by default), and why not.
  grep -E "gpu\.graphs: " "$d/train.log" | sed 's/^/    /' | tail -2
  if [[ $rc != 0 ]]; then
    say "training $name FAILED (status $rc); last lines:"
    tail -15 "$d/train.log" | sed 's/^/    /'
  else
    plan_run "$name" "$d"
  fi
  if [[ $dry_run == 1 ]]; then
    local r=$work/reference/$name
    mkdir -p "$r"
    say "  dry run: the same run in fp32 as its CPU fp32 reference"
    timeout 300 "${RUN[@]}" "$M" train "${RUN_INI[$name]}" "${overrides[@]}" --output.dir="$r" --train.precision=fp32 \
      > "$r/train.log" 2>&1 || say "  WARNING: the fp32 reference run failed (status $?)"
    python3 "$repo/perf/gpu/summarize.py" --make-reference "$r/metrics.jsonl" --how \
      "validate.sh --dry-run: the same tiny run with --train.precision=fp32 on the CPU build" > "$work/reference/$name.json" ||
      rm -f "$work/reference/$name.json"
  fi
}

# Step 6, after a finished run: `meshtrain plan` of the same run on this machine (it
# measures here: the square and the model-shape GEMM rates, attention as this build runs it,
# the AdamW and activation kernels, copy bandwidth) into train/$1/plan.{json,txt}, so that
# summarize.py sets the predicted step beside the measured one (issue 33: within 15%).
# ~5-10 s; skipped, and said so, when the budget cannot spare it (the headline run's plan
# keeps 200 s for what follows, the other runs' 320 s: their plans yield to the peers).
plan_run() {
  local name=$1 d=$2 limit rc reserve=320
  [[ $name == "${RUNS[0]}" ]] && reserve=200
  limit=$(left $reserve)
  (( limit > 45 )) && limit=45
  if (( limit < 15 )); then
    echo "SKIP time budget spent" > "$d/plan_status.txt"; say "  plan $name: NOT RUN (time budget spent)"; return
  fi
  timeout "$limit" "${RUN[@]}" "$M" plan "${RUN_INI[$name]}" $(meshtrain_overrides "$name") --json "$d/plan.json" \
    > "$d/plan.txt" 2>&1
  rc=$?
  if [[ $rc == 0 && -f $d/plan.json ]]; then
    echo "PASS" > "$d/plan_status.txt"
    grep -E "^cost model:|^  elementwise =|^  attention" "$d/plan.txt" | sed 's/^/    /'
  else
    echo "FAIL exit $rc: $(tail -1 "$d/plan.txt" | cut -c1-150)" > "$d/plan_status.txt"
  fi
  say "  plan $name: $(cat "$d/plan_status.txt")"
}

# Step 5: compute-sanitizer's memcheck on a 2-step tiny run of the CUDA build. Writes
# sanitizer.txt (its output) and sanitizer_status.txt ("PASS", "FAIL why" or "SKIP why").
sanitizer_step() {
  local peak=$1 cs="" limit rc
  cs=$(command -v compute-sanitizer || true)
  for c in ${CUDA_HOME:+$CUDA_HOME/bin/compute-sanitizer} /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [[ -z $cs && -x $c ]] && cs=$c
  done
  if ! grep -q "MESHTRAIN_ENABLE_CUDA: ON" "$work/BUILD_INFO.txt"; then
    echo "SKIP a host build (no device code to check)" > "$work/sanitizer_status.txt"
  elif [[ -z $cs ]]; then
    echo "SKIP compute-sanitizer not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda)" > "$work/sanitizer_status.txt"
  elif ! command -v nvidia-smi >/dev/null; then
    echo "SKIP no GPU (nvidia-smi absent)" > "$work/sanitizer_status.txt"
  else
    limit=$(left 330)
    (( limit > 120 )) && limit=120
    if (( limit < 30 )); then
      echo "SKIP time budget spent" > "$work/sanitizer_status.txt"
    else
      local args=(train inputs/tiny-gpt2.ini --train.steps=2 --train.precision=bf16 --train.eval_every=0
                  --checkpoint.save_final=false --output.dir="$work/sanitizer" --parallel.backend=nccl --train.peak_tflops=1
                  "${AUTO_ARGS[@]}" ${MESHTRAIN_EXTRA_ARGS:-})
      say "compute-sanitizer --tool memcheck: meshtrain ${args[*]}"
      # The sanitizer starts the program itself: the library path goes to both (env), or the
      # packed loader is the program it starts (the loader runs meshtrain in its own process).
      if [[ -n $use_loader ]]; then
        timeout "$limit" "$cs" --tool memcheck --error-exitcode 99 --print-limit 20 "${RUN[@]}" "$M" "${args[@]}" \
          > "$work/sanitizer.txt" 2>&1
      else
        timeout "$limit" "${RUN[@]}" "$cs" --tool memcheck --error-exitcode 99 --print-limit 20 "$M" "${args[@]}" \
          > "$work/sanitizer.txt" 2>&1
      fi
      rc=$?
      case $rc in
        0) echo "PASS $(grep -m1 'ERROR SUMMARY' "$work/sanitizer.txt" | sed 's/^=* *//')" ;;
        99) echo "FAIL $(grep -m1 'ERROR SUMMARY' "$work/sanitizer.txt" | sed 's/^=* *//')" ;;
        124) echo "FAIL timed out after $limit s" ;;
        *) echo "FAIL exit $rc: $(grep -v '^=*$' "$work/sanitizer.txt" | tail -1 | cut -c1-150)" ;;
      esac > "$work/sanitizer_status.txt"
    fi
  fi
  say "compute-sanitizer            $(cat "$work/sanitizer_status.txt")"
}

# Step 7: the PyTorch peer (perf/peer/torch_gpu.py) in mode $1 over every run, one process.
# peers/torch_$1.json gets one entry per run (written after each, so a peer stopped at its
# time limit still reports the runs it finished); the dry run uses Debian's torch on the CPU.
peer_runs() {
  local mode=$1 py=${MESHTRAIN_PEER_PYTHON:-python3} limit reserve specs=() name kv spec dev=cuda rc
  [[ $dry_run == 1 ]] && { py=${MESHTRAIN_PEER_PYTHON:-/usr/bin/python3}; dev=cpu; }
  mkdir -p "$work/peers"
  # The Llama before GPT-2 at micro-batch 32: when the budget cuts compile short, the
  # comparison the issue's must-show needs (Llama vs torch.compile) is the one kept.
  for name in "${RUNS[0]}" "${RUNS[2]}" "${RUNS[1]}"; do
    spec="$name:${RUN_INI[$name]}"
    for kv in $(run_shape "$name"); do spec+=":$kv"; done
    specs+=(--run "$spec")
  done
  # eager keeps time for compile and the profile; compile keeps time for the profile.
  if [[ $mode == eager ]]; then reserve=190; else reserve=35; fi
  limit=$(left "$reserve")
  if (( limit < 30 )); then
    say "PyTorch $mode: NOT RUN (time budget spent)"
    echo "{\"mode\": \"$mode\", \"not_run\": \"time budget spent\", \"runs\": []}" > "$work/peers/torch_$mode.json"
    return
  fi
  # No run is started after --time-limit (reported SKIP); one compile of GPT-2 takes ~1 min.
  local soft=$(( limit - 20 ))
  [[ $mode == compile ]] && soft=$(( limit - 100 ))
  (( soft < 10 )) && soft=10
  # Isolated (a dry run here): Debian's torch links system libraries the package also carries
  # (OpenBLAS, libcurl, ...), now hidden; the packed copies of them stand in.
  local env_peer=()
  [[ -n ${MESHTRAIN_VALIDATE_ISOLATED:-} ]] && env_peer=("LD_LIBRARY_PATH=$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  say "PyTorch $mode ($py, $dev, limit $limit s): perf/peer/torch_gpu.py --mode $mode --steps $steps ${specs[*]}"
  timeout "$limit" env "${env_peer[@]}" "$py" "$repo/perf/peer/torch_gpu.py" --mode "$mode" --device "$dev" --steps "$steps" \
    --warmup 5 --time-limit "$soft" --json "$work/peers/torch_$mode.json" "${specs[@]}" \
    > "$work/peers/torch_$mode.out" 2> "$work/peers/torch_$mode.log"
  rc=$?
  echo "$rc" > "$work/peers/torch_$mode.status"
  grep "^torch_gpu " "$work/peers/torch_$mode.log" | sed 's/^/    /'
  if [[ $rc != 0 ]]; then
    say "PyTorch $mode: exit $rc$([[ $rc == 124 ]] && echo " (stopped at the $limit s limit)"); last lines:"
    grep -v "^torch_gpu " "$work/peers/torch_$mode.log" | tail -5 | sed 's/^/    /'
  fi
}

# Step 8: Kokkos Tools' simple kernel timer (libkp_kernel_timer.so, and kp_reader to print
# its .dat file; built from github.com/kokkos/kokkos-tools, carried in the package's tools/
# when pack.sh found them, or at $MESHTRAIN_KOKKOS_TOOLS here) on a 6-step GPT-2 run.
# kernel_timer.txt gets kp_reader's table; kernel_profile_status.txt "PASS ...", "SKIP why".
kernel_profile() {
  local peak=$1 dir="" lib="" reader limit rc f
  for dir in "${MESHTRAIN_KOKKOS_TOOLS:-}" "$P/tools"; do
    # CMake names the timer libkp_kernel_timer.so, kokkos-tools' own Makefile kp_kernel_timer.so.
    for f in libkp_kernel_timer.so kp_kernel_timer.so; do
      [[ -z $lib && -n $dir && -f $dir/$f ]] && lib=$dir/$f
    done
    [[ -n $lib && -x $dir/kp_reader ]] && break
    dir="" lib=""
  done
  if [[ -z $dir ]]; then
    echo "SKIP no libkp_kernel_timer.so + kp_reader (package tools/ or \$MESHTRAIN_KOKKOS_TOOLS; pack.sh carries them from \$MESHTRAIN_KOKKOS_TOOLS)" \
      > "$work/kernel_profile_status.txt"
    say "kernel profile               $(cat "$work/kernel_profile_status.txt")"
    return
  fi
  limit=$(left 0)
  (( limit > 90 )) && limit=90
  if (( limit < 20 )); then
    echo "SKIP time budget spent" > "$work/kernel_profile_status.txt"
    say "kernel profile               $(cat "$work/kernel_profile_status.txt")"; return
  fi
  reader=$dir/kp_reader
  local name=${RUNS[0]} d=$work/profile
  mkdir -p "$d"
  local overrides=(--output.dir="$d/run" --train.steps=6 --checkpoint.save_final=false --train.eval_every=0
                   $(meshtrain_overrides "$name"))
  [[ $peak != 0 ]] && overrides+=(--train.peak_tflops="$peak")
  say "kernel profile: KOKKOS_TOOLS_LIBS=$lib meshtrain train ${RUN_INI[$name]} ${overrides[*]}"
  # Kokkos 3.x reads KOKKOS_PROFILE_LIBRARY, 4.x KOKKOS_TOOLS_LIBS; the timer writes
  # <host>-<pid>.dat into the working directory at Kokkos::finalize.
  (cd "$d" && KOKKOS_TOOLS_LIBS=$lib KOKKOS_PROFILE_LIBRARY=$lib timeout "$limit" "${RUN[@]}" "$M" train \
     "$repo/${RUN_INI[$name]}" "${overrides[@]}" > "$d/train.log" 2>&1)
  rc=$?
  local dat
  dat=$(ls "$d"/*.dat 2>/dev/null | head -1)
  if [[ $rc != 0 || -z $dat ]]; then
    echo "FAIL the profiled run exited $rc$([[ -z $dat ]] && echo ", no .dat file written")" > "$work/kernel_profile_status.txt"
  elif "${RUN[@]}" "$reader" "$dat" > "$work/kernel_timer.txt" 2>&1; then
    echo "PASS 6 steps of $name (incl. the first), kp_reader's table in kernel_timer.txt" > "$work/kernel_profile_status.txt"
  else
    echo "FAIL kp_reader could not read $dat" > "$work/kernel_profile_status.txt"
  fi
  say "kernel profile               $(cat "$work/kernel_profile_status.txt")"
}

# ---- run, summarise, collect ---------------------------------------------------------------
rm -rf "$work"
mkdir -p "$work" "$out"
main 2>&1 | tee "$work/validate.log.part"
main_rc=${PIPESTATUS[0]}
[[ $check_pack == 1 ]] && exit "$main_rc"
[[ $main_rc == 0 ]] || fail=1
# `fail` set inside the piped main() does not reach here: recompute from the files.
if [[ -f $work/tests/status.txt ]] &&
   awk -v dry="$dry_run" '$2 != 0 && !(dry == 1 && $2 == 77) {bad=1} END {exit !bad}' "$work/tests/status.txt"; then
  fail=1
fi
[[ -f $work/selfcheck_status.txt && $(cat "$work/selfcheck_status.txt") == 0 ]] || fail=1
for f in "$work"/train/*/status.txt; do [[ -f $f && $(cat "$f") == 0 ]] || fail=1; done
ref_dir=$repo/perf/results/gpu/reference
[[ $dry_run == 1 ]] && ref_dir=$work/reference
python3 "$repo/perf/gpu/summarize.py" --work "$work" --table "$work/table.txt" --json "$work/results.json" \
  --dry-run "$dry_run" --reference-dir "$ref_dir" > "$work/summarize.log" 2>&1 || { cat "$work/summarize.log"; fail=1; }
[[ -f $work/table.txt ]] && cat "$work/table.txt"
[[ -f $work/results.json ]] && python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("ok") else 1)' \
  "$work/results.json" || fail=1
echo "[validate $(elapsed)s] done: $([[ $fail == 0 ]] && echo PASS || echo FAIL); results in $out"
{ cat "$work/validate.log.part"; [[ -f $work/table.txt ]] && cat "$work/table.txt"; } > "$work/validate.log"
cp "$work/validate.log" "$out/"
for f in table.txt results.json; do [[ -f $work/$f ]] && cp "$work/$f" "$out/"; done
first_run=$work/train/${RUNS[0]}
[[ -f $first_run/metrics.jsonl ]] && cp "$first_run/metrics.jsonl" "$out/"
[[ -f $first_run/train.log ]] && cp "$first_run/train.log" "$out/"
tar -C "$work" -czf "$out/details.tar.gz" --exclude=meshtrain-gpu --exclude=fallback --exclude=validate.log.part \
  --exclude='*.dat' tests train BUILD_INFO.txt $(cd "$work" && ls -d peers profile sanitizer reference 2>/dev/null) $(cd "$work" && ls *.txt *.json *.csv 2>/dev/null | grep -v -e '^table.txt$' -e '^results.json$') 2>/dev/null
exit $fail
