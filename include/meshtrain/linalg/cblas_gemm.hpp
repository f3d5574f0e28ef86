#pragma once
/// \brief Host GEMM through CBLAS (OpenBLAS), row-major. Only host (non-CUDA) builds
/// compile it; CUDA builds run every GEMM through cuBLAS and need no host BLAS.

#include <string>

#include "core/bf16.hpp"

namespace meshtrain::linalg::cblas {

/// Row-major C (m, n) = alpha op(A) op(B) + beta C; bf16 operands are widened to fp32
/// scratch (OpenBLAS 0.3.21 has no sbgemm), multiplied with SGEMM and rounded back.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const double* a, int lda,
          const double* b, int ldb, float beta, double* c, int ldc);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda,
          const bf16* b, int ldb, float beta, bf16* c, int ldc);

/// bf16 A and B widened to fp32 scratch, SGEMM straight into the fp32 C (OpenBLAS 0.3.21 as
/// Debian ships it declares cblas_sbgemm but does not export it).
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* a, int lda,
          const bf16* b, int ldb, float beta, float* c, int ldc);

/// "OpenBLAS CBLAS (<openblas_get_config()>)".
std::string version_string();

}  // namespace meshtrain::linalg::cblas
