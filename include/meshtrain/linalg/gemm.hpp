#pragma once
/// \brief GEMM behind one interface: CBLAS (OpenBLAS) on host builds, cuBLAS
/// (`cublasGemmEx` / `cublasGemmStridedBatchedEx`, fp32 accumulation, bf16 tensor cores)
/// on CUDA builds, on the Kokkos execution-space stream. Row-major throughout:
///
///   C (m, n) = alpha * op(A) (m, k) * op(B) (k, n) + beta * C
///
/// with leading dimensions lda/ldb/ldc in elements (row strides). T = float, double or
/// bf16 (bf16 accumulates in fp32).

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/bf16.hpp"

namespace meshtrain::linalg {

enum class Op { N, T };

template <class T>
void gemm(Op op_a, Op op_b, int m, int n, int k, float alpha, const T* a, int lda, const T* b,
          int ldb, float beta, T* c, int ldc);

/// Mixed precision: bf16 A and B, fp32 C, fp32 accumulation (cuBLAS: cublasGemmEx with a
/// 32F C; host: the operands widened to fp32, SGEMM straight into C). With beta = 1 a weight
/// gradient accumulates in fp32 across calls (micro-steps, LM-head chunks) instead of being
/// rounded to bf16 after each (issue 33's "weight-gradient GEMMs write fp32").
void gemm(Op op_a, Op op_b, int m, int n, int k, float alpha, const bf16* a, int lda, const bf16* b, int ldb,
          float beta, float* c, int ldc);

/// C in the accumulation type acc_t<T>: a parameter gradient, which accumulates across calls
/// (beta = 1: micro-steps, LM-head chunks, several GEMMs into one weight) without being
/// rounded to T. gemm<T> for float and double; for bf16 the mixed GEMM above.
template <class T>
inline void gemm_acc(Op op_a, Op op_b, int m, int n, int k, float alpha, const T* a, int lda, const T* b, int ldb,
                     float beta, acc_t<T>* c, int ldc) {
  if constexpr (std::is_same_v<T, acc_t<T>>) gemm<T>(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else gemm(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// `batch_count` independent GEMMs; matrix i starts at a + i*stride_a (and likewise b, c).
template <class T>
void gemm_strided_batched(Op op_a, Op op_b, int m, int n, int k, float alpha, const T* a, int lda,
                          std::int64_t stride_a, const T* b, int ldb, std::int64_t stride_b,
                          float beta, T* c, int ldc, std::int64_t stride_c, int batch_count);

/// "OpenBLAS 0.3.21 (CBLAS)" or "cuBLAS 13.0".
std::string gemm_backend_name();
/// "off" on host builds; "CUDA 13.0, NCCL 2.x, device N: <name>" on CUDA builds.
std::string cuda_description();

}  // namespace meshtrain::linalg
