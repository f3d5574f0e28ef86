#include "linalg/gemm.hpp"

#include "core/views.hpp"

#if defined(MESHTRAIN_WITH_CUDA)
#include "build_config.hpp"
#include "comm/nccl_communicator.hpp"
#include "core/format.hpp"
#include "linalg/cublas_gemm.hpp"
#else
#include "linalg/cblas_gemm.hpp"
#endif

namespace meshtrain::linalg {
namespace {

/// The one GEMM backend of this build: cuBLAS on the Kokkos CUDA stream (CUDA builds), or
/// CBLAS on the host (host builds, where "device" pointers are host memory).
struct Backend {
#if defined(MESHTRAIN_WITH_CUDA)
  template <class T> static cublas::Type type();
  /// cuBLAS calls are ordered with the kernels: both run on Kokkos' stream.
  static void bind_stream() { cublas::set_stream(ExecSpace().cuda_stream()); }

  template <class T>
  static void gemm(Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda, const T* b, int ldb,
                   float beta, T* c, int ldc) {
    bind_stream();
    cublas::gemm(type<T>(), oa == Op::T, ob == Op::T, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  template <class T>
  static void batched(Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda, std::int64_t sa,
                      const T* b, int ldb, std::int64_t sb, float beta, T* c, int ldc, std::int64_t sc, int batch_count) {
    bind_stream();
    cublas::gemm_strided_batched(type<T>(), oa == Op::T, ob == Op::T, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta,
                                 c, ldc, sc, batch_count);
  }
  static std::string name() { return cublas::version_string(); }
  static std::string cuda() {
    return strprintf("%s, NCCL %s, device code sm_%d", cublas::device_description().c_str(),
                     nccl_version_string().c_str(), MESHTRAIN_CUDA_ARCH);
  }
#else
  template <class T>
  static void gemm(Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda, const T* b, int ldb,
                   float beta, T* c, int ldc) {
    cblas::gemm(oa == Op::T, ob == Op::T, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  template <class T>
  static void batched(Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda, std::int64_t sa,
                      const T* b, int ldb, std::int64_t sb, float beta, T* c, int ldc, std::int64_t sc, int batch_count) {
    for (int i = 0; i < batch_count; ++i)
      cblas::gemm(oa == Op::T, ob == Op::T, m, n, k, alpha, a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc, ldc);
  }
  static std::string name() { return cblas::version_string(); }
  static std::string cuda() { return "off (host build)"; }
#endif
};

#if defined(MESHTRAIN_WITH_CUDA)
template <> cublas::Type Backend::type<float>() { return cublas::Type::F32; }
template <> cublas::Type Backend::type<double>() { return cublas::Type::F64; }
template <> cublas::Type Backend::type<bf16>() { return cublas::Type::BF16; }
#endif

}  // namespace

template <class T>
void gemm(Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda, const T* b, int ldb, float beta,
          T* c, int ldc) {
  if (m == 0 || n == 0) return;
  Backend::gemm(oa, ob, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm_strided_batched(Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda, std::int64_t sa,
                          const T* b, int ldb, std::int64_t sb, float beta, T* c, int ldc, std::int64_t sc,
                          int batch_count) {
  if (m == 0 || n == 0 || batch_count == 0) return;
  Backend::batched(oa, ob, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch_count);
}

void gemm(Op oa, Op ob, int m, int n, int k, float alpha, const bf16* a, int lda, const bf16* b, int ldb, float beta,
          float* c, int ldc) {
  if (m == 0 || n == 0) return;
#if defined(MESHTRAIN_WITH_CUDA)
  Backend::bind_stream();
  cublas::gemm_bf16_f32(oa == Op::T, ob == Op::T, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  cblas::gemm(oa == Op::T, ob == Op::T, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

#define MESHTRAIN_INSTANTIATE_GEMM(T)                                                              \
  template void gemm<T>(Op, Op, int, int, int, float, const T*, int, const T*, int, float, T*, int); \
  template void gemm_strided_batched<T>(Op, Op, int, int, int, float, const T*, int, std::int64_t,   \
                                        const T*, int, std::int64_t, float, T*, int, std::int64_t, int);
MESHTRAIN_INSTANTIATE_GEMM(float)
MESHTRAIN_INSTANTIATE_GEMM(double)
MESHTRAIN_INSTANTIATE_GEMM(bf16)
#undef MESHTRAIN_INSTANTIATE_GEMM

std::string gemm_backend_name() { return Backend::name(); }

std::string cuda_description() { return Backend::cuda(); }

}  // namespace meshtrain::linalg
