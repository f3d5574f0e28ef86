#include "linalg/peak.hpp"

#include <algorithm>

#include "core/memory.hpp"
#include "core/timer.hpp"
#include "kernels/elementwise.hpp"
#include "linalg/gemm.hpp"

namespace meshtrain::linalg {
namespace {

template <class T>
GemmRate timed_gemm(Op oa, Op ob, int m, int n, int k, double seconds) {
  const std::size_t na = static_cast<std::size_t>(m) * k, nb = static_cast<std::size_t>(k) * n,
                    nc = static_cast<std::size_t>(m) * n;
  Buffer<T> a(na, MemCategory::Workspace), b(nb, MemCategory::Workspace), c(nc, MemCategory::Workspace);
  // Random operands in [-1, 1): a GPU's GEMM rate on constant operands reads high (fewer
  // toggling bits, less power); on CPUs the values do not matter.
  kernels::fill_uniform(a.data(), na, -1.0, 1.0, 1);
  kernels::fill_uniform(b.data(), nb, -1.0, 1.0, 2);
  // Row-major: A is (m,k), stored (k,m) when transposed; likewise B.
  const int lda = oa == Op::N ? k : m, ldb = ob == Op::N ? n : k;
  const auto once = [&] {
    gemm<T>(oa, ob, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), n);
    Kokkos::fence();
  };
  once();  // warm-up
  const double flop = 2.0 * m * static_cast<double>(n) * k;
  double best = 0, total = 0;
  int reps = 0;
  const double start = now_seconds();
  do {
    const double t0 = now_seconds();
    once();
    const double t = now_seconds() - t0;
    best = std::max(best, flop / t);
    total += t;
    ++reps;
  } while (now_seconds() - start < seconds);
  return {best, flop * reps / total};
}

}  // namespace

GemmRate time_gemm(Op a, Op b, int m, int n, int k, double seconds, bool bf16) {
  return bf16 ? timed_gemm<meshtrain::bf16>(a, b, m, n, k, seconds) : timed_gemm<float>(a, b, m, n, k, seconds);
}

double measure_gemm_flops(int n, double seconds, bool bf16) { return time_gemm(Op::N, Op::N, n, n, n, seconds, bf16).best; }

double measure_copy_bandwidth(double bytes, double seconds) {
  const std::size_t n = static_cast<std::size_t>(bytes / sizeof(float));
  Buffer<float> a(n, MemCategory::Workspace), b(n, MemCategory::Workspace);
  kernels::fill(a.data(), n, 1.0);
  kernels::fill(b.data(), n, 0.0);
  Kokkos::fence();
  double best = 0;
  const double start = now_seconds();
  do {
    const double t0 = now_seconds();
    Kokkos::deep_copy(b.view(), a.view());
    Kokkos::fence();
    best = std::max(best, 2.0 * n * sizeof(float) / (now_seconds() - t0));
  } while (now_seconds() - start < seconds);
  return best;
}

}  // namespace meshtrain::linalg
