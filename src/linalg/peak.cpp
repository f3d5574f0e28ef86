#include "meshtrain/linalg/peak.hpp"

#include <algorithm>

#include "meshtrain/core/memory.hpp"
#include "meshtrain/core/timer.hpp"
#include "meshtrain/kernels/elementwise.hpp"
#include "meshtrain/linalg/gemm.hpp"

namespace meshtrain::linalg {
namespace {

template <class T>
double gemm_flops(int n, double seconds) {
  const std::size_t nn = static_cast<std::size_t>(n) * n;
  Buffer<T> a(nn, MemCategory::Workspace), b(nn, MemCategory::Workspace), c(nn, MemCategory::Workspace);
  kernels::fill(a.data(), nn, 0.5);
  kernels::fill(b.data(), nn, 0.25);
  gemm<T>(Op::N, Op::N, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm-up
  Kokkos::fence();
  double best = 0;
  const double start = now_seconds();
  do {
    const double t0 = now_seconds();
    gemm<T>(Op::N, Op::N, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    Kokkos::fence();
    best = std::max(best, 2.0 * n * n * static_cast<double>(n) / (now_seconds() - t0));
  } while (now_seconds() - start < seconds);
  return best;
}

}  // namespace

double measure_gemm_flops(int n, double seconds, bool bf16) {
  return bf16 ? gemm_flops<meshtrain::bf16>(n, seconds) : gemm_flops<float>(n, seconds);
}

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
