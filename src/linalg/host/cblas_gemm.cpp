#include "linalg/cblas_gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "core/format.hpp"

namespace meshtrain::linalg::cblas {
namespace {

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// Host bf16: OpenBLAS 0.3.21 (Debian 12) has no sbgemm, so bf16 operands are widened to
// fp32 scratch, multiplied with SGEMM, and rounded back. Scratch is reused across calls.
std::vector<float>& scratch(int which) {
  thread_local std::vector<float> buffers[3];
  return buffers[which];
}

void widen(const bf16* src, int rows, int cols, int ld, std::vector<float>& dst) {
  dst.resize(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      dst[static_cast<std::size_t>(r) * cols + c] = static_cast<float>(src[static_cast<std::size_t>(r) * ld + c]);
}

}  // namespace

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const double* a, int lda, const double* b,
          int ldb, float beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* a, int lda, const bf16* b, int ldb,
          float beta, float* c, int ldc) {
  const int a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int b_rows = tb ? n : k, b_cols = tb ? k : n;
  widen(a, a_rows, a_cols, lda, scratch(0));
  widen(b, b_rows, b_cols, ldb, scratch(1));
  cblas_sgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, scratch(0).data(), std::max(a_cols, 1), scratch(1).data(),
              std::max(b_cols, 1), beta, c, ldc);
}

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* a, int lda, const bf16* b, int ldb,
          float beta, bf16* c, int ldc) {
  // The mixed form into an fp32 copy of C, rounded back to bf16 once.
  std::vector<float>& cf = scratch(2);
  if (beta != 0.0f) widen(c, m, n, ldc, cf);
  else cf.assign(static_cast<std::size_t>(m) * n, 0.0f);
  gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cf.data(), std::max(n, 1));
  for (int r = 0; r < m; ++r)
    for (int col = 0; col < n; ++col)
      c[static_cast<std::size_t>(r) * ldc + col] = bf16(cf[static_cast<std::size_t>(r) * n + col]);
}

std::string version_string() { return strprintf("OpenBLAS CBLAS (%s)", openblas_get_config()); }

}  // namespace meshtrain::linalg::cblas
