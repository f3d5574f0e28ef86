#include "linalg/gemm_epilogue.hpp"

#include <type_traits>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "kernels/elementwise.hpp"

#if defined(MESHTRAIN_WITH_CUDA)
#include <mutex>
#include <set>
#include <string>

#include "core/log.hpp"
#include "core/views.hpp"
#include "linalg/cublaslt_gemm.hpp"
#endif

namespace meshtrain::linalg {
namespace {

/// The GEMM, then one pass of the epilogue: the host twin, and the form of every call
/// cuBLASLt does not take. Rounds the GEMM's result to T first, like the unfused kernels.
template <class T, class TC>
void gemm_then_pass(Epilogue ep, Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda, const T* b,
                    int ldb, float beta, TC* c, int ldc, const EpilogueOperands<T>& x) {
  if constexpr (!std::is_same_v<TC, T>) {
    // A weight gradient in the accumulation type (the one such form, checked by the caller).
    gemm_acc<T>(oa, ob, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    kernels::bias_backward(b, x.bias_grad, k, n, ldb);
  } else {
    switch (ep) {
      case Epilogue::Bias:
        gemm<T>(oa, ob, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        kernels::add_bias(c, x.bias, m, n, ldc);
        break;
      case Epilogue::BiasGelu:
        // The GEMM writes the pre-activation, the pass adds the bias there and writes gelu to c.
        gemm<T>(oa, ob, m, n, k, alpha, a, lda, b, ldb, 0.0f, x.pre, x.ld_pre);
        kernels::bias_gelu_forward(x.pre, x.ld_pre, x.bias, c, ldc, m, n);
        break;
      case Epilogue::DGeluBiasGrad:
        gemm<T>(oa, ob, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
        kernels::gelu_backward_bias_grad(x.pre, x.ld_pre, c, ldc, x.bias_grad, m, n);
        break;
      case Epilogue::BiasGradB:
        gemm<T>(oa, ob, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        kernels::bias_backward(b, x.bias_grad, k, n, ldb);
        break;
    }
  }
}

#if defined(MESHTRAIN_WITH_CUDA)
/// The fused form: one cuBLASLt matmul, or false (nothing queued) with the reason logged once
/// per distinct reason.
template <class T, class TC>
bool try_cublaslt(Epilogue ep, Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda, const T* b,
                  int ldb, float beta, TC* c, int ldc, const EpilogueOperands<T>& x) {
  std::string why_not;
  if constexpr (std::is_same_v<T, double>) {
    why_not = "fp64 GEMMs (the gradient checks)";
  } else {
    cublaslt::Call call;
    call.type = std::is_same_v<T, bf16> ? cublas::Type::BF16 : cublas::Type::F32;
    call.fp32_output = !std::is_same_v<TC, T>;  // bf16 operands, an fp32 weight gradient
    call.epilogue = ep;
    call.trans_a = oa == Op::T;
    call.trans_b = ob == Op::T;
    call.m = m;
    call.n = n;
    call.k = k;
    call.alpha = alpha;
    call.beta = beta;
    call.a = a;
    call.lda = lda;
    call.b = b;
    call.ldb = ldb;
    call.c = c;
    call.ldc = ldc;
    call.pre = x.pre;
    call.ld_pre = x.ld_pre;
    // cuBLASLt writes a bias gradient (n of the output's type TC), the caller's (acc_t<T>)
    // accumulates: a scratch in between, added (widened from bf16 where TC is bf16).
    const bool grad = ep == Epilogue::DGeluBiasGrad || ep == Epilogue::BiasGradB;
    Buffer<TC> bias_scratch(grad && x.bias_grad ? static_cast<std::size_t>(n) : 0, MemCategory::Workspace);
    call.bias = grad ? static_cast<void*>(bias_scratch.data()) : const_cast<T*>(x.bias);
    const std::int64_t ws = cublaslt::workspace_bytes(call, &why_not);
    if (ws >= 0) {
      Buffer<unsigned char> workspace(static_cast<std::size_t>(ws), MemCategory::Workspace);
      cublaslt::matmul(call, workspace.data(), ExecSpace().cuda_stream());
      if (bias_scratch.data()) {
        if constexpr (std::is_same_v<TC, acc_t<T>>)
          kernels::add_inplace(x.bias_grad, bias_scratch.data(), static_cast<std::size_t>(n));
        else
          kernels::add_widened<T>(x.bias_grad, bias_scratch.data(), static_cast<std::size_t>(n));
      }
      return true;
    }
  }
  static std::mutex mutex;
  static std::set<std::string> told;
  std::lock_guard<std::mutex> lock(mutex);
  if (told.insert(why_not).second)
    log::info("gpu.epilogues: %s take the GEMM then one Kokkos pass", why_not.c_str());
  return false;
}
#endif

}  // namespace

template <class T, class TC>
EpilogueImpl gemm_epilogue(Epilogue ep, Op oa, Op ob, int m, int n, int k, float alpha, const T* a, int lda,
                           const T* b, int ldb, float beta, TC* c, int ldc, const EpilogueOperands<T>& x,
                           EpiloguePath path) {
  constexpr bool wide_c = !std::is_same_v<TC, T>;
  static_assert(!wide_c || std::is_same_v<TC, acc_t<T>>, "C is T or acc_t<T>");
  MESHTRAIN_ASSERT(!wide_c || ep == Epilogue::BiasGradB,
                   "gemm_epilogue %s: only BiasGradB writes C in the accumulation type", epilogue_name(ep));
  MESHTRAIN_ASSERT((ep != Epilogue::BiasGelu && ep != Epilogue::DGeluBiasGrad) || (beta == 0.0f && x.pre != nullptr),
                   "gemm_epilogue %s: beta must be 0 and pre given", epilogue_name(ep));
  MESHTRAIN_ASSERT(ep != Epilogue::BiasGradB || ob == Op::N, "gemm_epilogue BiasGradB: B must be untransposed");
  MESHTRAIN_ASSERT((ep != Epilogue::Bias && ep != Epilogue::BiasGelu) || x.bias != nullptr,
                   "gemm_epilogue %s: no bias", epilogue_name(ep));
  if (m == 0 || n == 0) return EpilogueImpl::GemmThenPass;
#if defined(MESHTRAIN_WITH_CUDA)
  // A weight gradient without a bias gradient is a plain GEMM.
  const bool nothing_to_fuse = ep == Epilogue::BiasGradB && x.bias_grad == nullptr;
  if (path == EpiloguePath::Auto && !nothing_to_fuse &&
      try_cublaslt(ep, oa, ob, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, x))
    return EpilogueImpl::Fused;
#endif
  gemm_then_pass(ep, oa, ob, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, x);
  return EpilogueImpl::GemmThenPass;
}

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::Bias: return "Bias";
    case Epilogue::BiasGelu: return "BiasGelu";
    case Epilogue::DGeluBiasGrad: return "DGeluBiasGrad";
    case Epilogue::BiasGradB: return "BiasGradB";
  }
  return "?";
}

bool gemm_epilogue_fused_built() {
#if defined(MESHTRAIN_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

#define MESHTRAIN_INSTANTIATE_GEMM_EPILOGUE(T, TC)                                                          \
  template EpilogueImpl gemm_epilogue<T, TC>(Epilogue, Op, Op, int, int, int, float, const T*, int, const T*, int, \
                                             float, TC*, int, const EpilogueOperands<T>&, EpiloguePath);
MESHTRAIN_INSTANTIATE_GEMM_EPILOGUE(float, float)
MESHTRAIN_INSTANTIATE_GEMM_EPILOGUE(double, double)
MESHTRAIN_INSTANTIATE_GEMM_EPILOGUE(bf16, bf16)
MESHTRAIN_INSTANTIATE_GEMM_EPILOGUE(bf16, float)
#undef MESHTRAIN_INSTANTIATE_GEMM_EPILOGUE

}  // namespace meshtrain::linalg
