#include "meshtrain/linalg/gemm.hpp"

#include <cblas.h>

#include <vector>

#include "meshtrain/core/error.hpp"
#include "meshtrain/core/format.hpp"
#include "meshtrain/core/views.hpp"

#if defined(MESHTRAIN_WITH_CUDA)
#include "meshtrain/linalg/cublas_gemm.hpp"
#include "meshtrain/comm/nccl_communicator.hpp"
#endif

namespace meshtrain::linalg {
namespace {

CBLAS_TRANSPOSE cblas_op(Op op) { return op == Op::T ? CblasTrans : CblasNoTrans; }

// Host bf16: OpenBLAS 0.3.21 (Debian 12) has no sbgemm, so bf16 operands are widened to
// fp32 scratch, multiplied with SGEMM, and rounded back. Scratch is reused across calls.
std::vector<float>& scratch(int which) {
  thread_local std::vector<float> buffers[3];
  return buffers[which];
}

void widen(const bf16* src, int rows, int cols, int ld, std::vector<float>& dst) {
  dst.resize(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) dst[static_cast<std::size_t>(r) * cols + c] = static_cast<float>(src[static_cast<std::size_t>(r) * ld + c]);
}

void host_gemm(Op oa, Op ob, int m, int n, int k, float alpha, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, cblas_op(oa), cblas_op(ob), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void host_gemm(Op oa, Op ob, int m, int n, int k, float alpha, const double* a, int lda,
               const double* b, int ldb, float beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, cblas_op(oa), cblas_op(ob), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void host_gemm(Op oa, Op ob, int m, int n, int k, float alpha, const bf16* a, int lda,
               const bf16* b, int ldb, float beta, bf16* c, int ldc) {
  const int a_rows = oa == Op::N ? m : k, a_cols = oa == Op::N ? k : m;
  const int b_rows = ob == Op::N ? k : n, b_cols = ob == Op::N ? n : k;
  widen(a, a_rows, a_cols, lda, scratch(0));
  widen(b, b_rows, b_cols, ldb, scratch(1));
  std::vector<float>& cf = scratch(2);
  if (beta != 0.0f) widen(c, m, n, ldc, cf);
  else cf.assign(static_cast<std::size_t>(m) * n, 0.0f);
  cblas_sgemm(CblasRowMajor, cblas_op(oa), cblas_op(ob), m, n, k, alpha, scratch(0).data(), a_cols,
              scratch(1).data(), b_cols, beta, cf.data(), n);
  for (int r = 0; r < m; ++r)
    for (int col = 0; col < n; ++col) c[static_cast<std::size_t>(r) * ldc + col] = bf16(cf[static_cast<std::size_t>(r) * n + col]);
}

#if defined(MESHTRAIN_WITH_CUDA)
template <class T> cublas::Type cublas_type();
template <> cublas::Type cublas_type<float>() { return cublas::Type::F32; }
template <> cublas::Type cublas_type<double>() { return cublas::Type::F64; }
template <> cublas::Type cublas_type<bf16>() { return cublas::Type::BF16; }
void bind_stream() { cublas::set_stream(ExecSpace().cuda_stream()); }
#endif

}  // namespace

template <class T>
void gemm(Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda, const T* b, int ldb,
          float beta, T* c, int ldc) {
  if (m == 0 || n == 0) return;
#if defined(MESHTRAIN_WITH_CUDA)
  bind_stream();
  cublas::gemm(cublas_type<T>(), oa == Op::T, ob == Op::T, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  host_gemm(oa, ob, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

template <class T>
void gemm_strided_batched(Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda,
                          std::int64_t sa, const T* b, int ldb, std::int64_t sb, float beta, T* c,
                          int ldc, std::int64_t sc, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
#if defined(MESHTRAIN_WITH_CUDA)
  bind_stream();
  cublas::gemm_strided_batched(cublas_type<T>(), oa == Op::T, ob == Op::T, m, n, k, alpha, a, lda, sa,
                               b, ldb, sb, beta, c, ldc, sc, batch);
#else
  for (int i = 0; i < batch; ++i)
    host_gemm(oa, ob, m, n, k, alpha, a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc, ldc);
#endif
}

#define MESHTRAIN_INSTANTIATE_GEMM(T)                                                          \
  template void gemm<T>(Op, Op, int, int, int, float, const T*, int, const T*, int, float, T*, \
                        int);                                                                  \
  template void gemm_strided_batched<T>(Op, Op, int, int, int, float, const T*, int, std::int64_t, \
                                        const T*, int, std::int64_t, float, T*, int, std::int64_t, int);
MESHTRAIN_INSTANTIATE_GEMM(float)
MESHTRAIN_INSTANTIATE_GEMM(double)
MESHTRAIN_INSTANTIATE_GEMM(bf16)
#undef MESHTRAIN_INSTANTIATE_GEMM

std::string gemm_backend_name() {
#if defined(MESHTRAIN_WITH_CUDA)
  return cublas::version_string();
#else
  return strprintf("OpenBLAS CBLAS (%s)", openblas_get_config());
#endif
}

std::string cuda_description() {
#if defined(MESHTRAIN_WITH_CUDA)
  return cublas::device_description() + ", NCCL " + nccl_version_string();
#else
  return "off (host build)";
#endif
}

}  // namespace meshtrain::linalg
