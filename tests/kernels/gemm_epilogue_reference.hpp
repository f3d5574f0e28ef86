#pragma once
/// \brief Double-precision references of the GEMM epilogues (linalg/gemm_epilogue.hpp),
/// shared by test_kernels_gemm_epilogue and selfcheck_paths: the tanh GELU and its derivative,
/// the erf GELU (to tell the two apart), and a row-major op(A) op(B) with the sum of the
/// products' magnitudes (the scale a rounding error is measured against). No test framework.

#include <cmath>
#include <cstddef>
#include <vector>

namespace meshtrain::test {

/// GPT-2's GELU ("gelu_new"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline double gelu_tanh_ref(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
inline double gelu_tanh_grad_ref(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}
/// The exact GELU, x Phi(x): within 4.7e-4 of the tanh form (largest near |x| = 2.7).
inline double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

/// p (m, n) = op(A) op(B) for row-major stored A (lda) and B (ldb); absp (if given) the sum
/// of |a b| over k per element.
inline void gemm_ref(bool trans_a, bool trans_b, int m, int n, int k, const double* a, int lda, const double* b,
                     int ldb, std::vector<double>& p, std::vector<double>* absp = nullptr) {
  // op(B) as a contiguous (k, n) copy, so the inner loop runs along rows.
  std::vector<double> bk(static_cast<std::size_t>(k) * n);
  for (int q = 0; q < k; ++q)
    for (int j = 0; j < n; ++j)
      bk[static_cast<std::size_t>(q) * n + j] =
          trans_b ? b[static_cast<std::size_t>(j) * ldb + q] : b[static_cast<std::size_t>(q) * ldb + j];
  p.assign(static_cast<std::size_t>(m) * n, 0.0);
  if (absp) absp->assign(p.size(), 0.0);
  for (int i = 0; i < m; ++i)
    for (int q = 0; q < k; ++q) {
      const double x = trans_a ? a[static_cast<std::size_t>(q) * lda + i] : a[static_cast<std::size_t>(i) * lda + q];
      const double* br = bk.data() + static_cast<std::size_t>(q) * n;
      double* pr = p.data() + static_cast<std::size_t>(i) * n;
      for (int j = 0; j < n; ++j) pr[j] += x * br[j];
      if (absp) {
        double* ar = absp->data() + static_cast<std::size_t>(i) * n;
        for (int j = 0; j < n; ++j) ar[j] += std::fabs(x * br[j]);
      }
    }
}

}  // namespace meshtrain::test
