#include "linalg/cublas_gemm.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/check.hpp"
#include "core/format.hpp"

namespace meshtrain::linalg::cublas {
namespace {

struct Handle {
  cublasHandle_t h = nullptr;
  Handle() {
    CUBLAS_CHECK(cublasCreate(&h));
    // Allow tensor cores for bf16 (fp32 accumulation is requested per call).
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  }
  ~Handle() {
    if (h) cublasDestroy(h);
  }
};

cublasHandle_t handle() {
  thread_local Handle h;
  return h.h;
}

cudaDataType_t cuda_type(Type t) {
  switch (t) {
    case Type::F32: return CUDA_R_32F;
    case Type::F64: return CUDA_R_64F;
    case Type::BF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

cublasComputeType_t compute_type(Type t) {
  return t == Type::F64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
}

}  // namespace

void set_stream(void* stream) { CUBLAS_CHECK(cublasSetStream(handle(), static_cast<cudaStream_t>(stream))); }

void gemm(Type type, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a,
          int lda, const void* b, int ldb, float beta, void* c, int ldc) {
  // Row-major C (m x n) is column-major C^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m).
  const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t dt = cuda_type(type);
  if (type == Type::F64) {
    const double al = alpha, be = beta;
    CUBLAS_CHECK(cublasGemmEx(handle(), ob, oa, n, m, k, &al, b, dt, ldb, a, dt, lda, &be, c, dt, ldc,
                              compute_type(type), CUBLAS_GEMM_DEFAULT));
  } else {
    CUBLAS_CHECK(cublasGemmEx(handle(), ob, oa, n, m, k, &alpha, b, dt, ldb, a, dt, lda, &beta, c, dt,
                              ldc, compute_type(type), CUBLAS_GEMM_DEFAULT));
  }
}

void gemm_bf16_f32(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                   const void* b, int ldb, float beta, void* c, int ldc) {
  const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasGemmEx(handle(), ob, oa, n, m, k, &alpha, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &beta, c,
                            CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_strided_batched(Type type, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const void* a, int lda, std::int64_t stride_a, const void* b, int ldb,
                          std::int64_t stride_b, float beta, void* c, int ldc, std::int64_t stride_c,
                          int batch_count) {
  const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t dt = cuda_type(type);
  if (type == Type::F64) {
    const double al = alpha, be = beta;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle(), ob, oa, n, m, k, &al, b, dt, ldb, stride_b, a, dt,
                                            lda, stride_a, &be, c, dt, ldc, stride_c, batch_count,
                                            compute_type(type), CUBLAS_GEMM_DEFAULT));
  } else {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle(), ob, oa, n, m, k, &alpha, b, dt, ldb, stride_b, a,
                                            dt, lda, stride_a, &beta, c, dt, ldc, stride_c, batch_count,
                                            compute_type(type), CUBLAS_GEMM_DEFAULT));
  }
}

std::string version_string() {
  int v = 0;
  cublasGetVersion(handle(), &v);
  return strprintf("cuBLAS %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

std::string device_description() {
  int runtime = 0, driver = 0, dev = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  if (cudaGetDevice(&dev) != cudaSuccess) return "no CUDA device";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return "no CUDA device";
  return strprintf("CUDA runtime %d.%d, driver %d.%d, device %d: %s (sm_%d%d, %.0f GiB)", runtime / 1000,
                   runtime % 1000 / 10, driver / 1000, driver % 1000 / 10, dev, prop.name, prop.major,
                   prop.minor, prop.totalGlobalMem / 1073741824.0);
}

}  // namespace meshtrain::linalg::cublas
