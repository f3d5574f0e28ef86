#pragma once
/// \brief cuBLAS GEMM on device pointers (row-major interface, fp32 accumulation).
/// Host code only: no CUDA headers here, so it compiles in CPU builds as a link check.

#include <cstdint>
#include <string>

namespace meshtrain::linalg::cublas {

enum class Type { F32, F64, BF16 };

/// Binds the cuBLAS handle of this thread to `stream` (a cudaStream_t; nullptr = default).
void set_stream(void* stream);

/// Row-major C = alpha op(A) op(B) + beta C via the column-major identity C^T = op(B)^T op(A)^T.
void gemm(Type type, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a,
          int lda, const void* b, int ldb, float beta, void* c, int ldc);
/// bf16 A and B, fp32 C (cublasGemmEx with CUDA_R_16BF operands and a CUDA_R_32F C, fp32
/// compute), row-major like gemm.
void gemm_bf16_f32(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                   const void* b, int ldb, float beta, void* c, int ldc);
void gemm_strided_batched(Type type, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const void* a, int lda, std::int64_t stride_a, const void* b, int ldb,
                          std::int64_t stride_b, float beta, void* c, int ldc,
                          std::int64_t stride_c, int batch_count);

/// "cuBLAS 13.0.x".
std::string version_string();
/// "CUDA runtime 13.0, driver 13.0, device 0: NVIDIA H200 (sm_90, 139 GiB)" or why not.
std::string device_description();

}  // namespace meshtrain::linalg::cublas
