#!/usr/bin/env bash
# perf/gpu/launch_check.sh on object files whose symbols have the names of Kokkos' CUDA
# launchers (compiled here from C by the host compiler: no CUDA needed): a build whose
# kernels all take their functor as parameter passes; one kernel through constant or global
# memory fails and is named; a file without Kokkos kernels (a host build, or stripped)
# checks nothing and says so.
#
# Environment (set by meshtrain_add_script_test): MESHTRAIN_SOURCE_DIR, TEST_TMP.
set -uo pipefail
S=$MESHTRAIN_SOURCE_DIR/perf/gpu/launch_check.sh
d=${TEST_TMP:-/tmp/gpu_launch_check}
rm -rf "$d" && mkdir -p "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }

# A launcher symbol, as nvcc names Kokkos::Impl::cuda_parallel_launch_<how>_memory<F>
# (internal linkage: the L), for a functor type F named by $2.
launcher() { echo "_ZN6Kokkos4ImplL$(( ${#1} + 28 ))cuda_parallel_launch_${1}_memoryI${2}EEvv"; }
object() {  # object NAME SYMBOL...
  local name=$1; shift
  : > "$d/$name.c"
  for s in "$@"; do echo "void $s(void) {}" >> "$d/$name.c"; done
  cc -c -o "$d/$name.o" "$d/$name.c" || fail "cc could not build the fixture $name"
}
object good "$(launcher local 4Rows)" "$(launcher local 5Packs)" other_function
object constant "$(launcher local 4Rows)" "$(launcher constant 9BigLambda)"
object global "$(launcher global 10HugeLambda)"
object host other_function

out=$("$S" "$d/good.o" 2>&1); rc=$?
[[ $rc == 0 ]] || fail "all kernels with their functor as parameter: rc $rc: $out"
grep -q 'good.o: 2 kernels with their functor as parameter, 0 through constant memory, 0 through global memory' <<<"$out" ||
  fail "the counts of good.o: $out"

out=$("$S" "$d/good.o" "$d/constant.o" 2>&1); rc=$?
[[ $rc == 1 ]] || fail "a constant-memory launch must fail (rc 1), got $rc: $out"
grep -q 'constant.o: 1 kernels with their functor as parameter, 1 through constant memory' <<<"$out" ||
  fail "the counts of constant.o: $out"
grep -q 'functor of 512 bytes or more: .*cuda_parallel_launch_constant_memory<BigLambda>' <<<"$out" ||
  fail "the constant-memory kernel is not named (demangled): $out"
grep -q 'cannot capture correctly' <<<"$out" || fail "no reason given: $out"

out=$("$S" "$d/global.o" 2>&1); rc=$?
[[ $rc == 1 ]] || fail "a global-memory launch must fail (rc 1), got $rc: $out"
grep -q 'functor of 512 bytes or more: .*cuda_parallel_launch_global_memory<HugeLambda>' <<<"$out" ||
  fail "the global-memory kernel is not named: $out"

out=$("$S" "$d/host.o" 2>&1); rc=$?
[[ $rc == 2 ]] || fail "a file without Kokkos CUDA kernels checks nothing: rc 2 expected, got $rc: $out"
grep -q 'nothing was checked' <<<"$out" || fail "the host file's message: $out"

out=$("$S" "$d/absent.o" 2>&1); rc=$?
[[ $rc == 2 ]] || fail "a missing file: rc 2 expected, got $rc: $out"
out=$("$S" 2>&1); rc=$?
[[ $rc == 2 ]] || fail "no files: rc 2 expected, got $rc: $out"
echo "gpu_launch_check: all cases passed"
