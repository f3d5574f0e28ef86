#pragma once
/// \brief GEMMs that also do the elementwise work around them (gpu.epilogues): the bias, the
/// bias + GELU of an MLP's first projection keeping the pre-activation, and in backward the
/// GELU gradient with the bias gradient, and a weight-gradient GEMM that also sums the bias
/// gradient. Row-major like linalg::gemm (linalg/gemm.hpp):
///
///   Bias           C = alpha op(A) op(B) + beta C + bias            bias (n), broadcast over rows
///   BiasGelu       pre = alpha op(A) op(B) + bias;  C = gelu(pre)   beta = 0; pre (m, n; ld_pre) written
///   DGeluBiasGrad  C = (alpha op(A) op(B)) * gelu'(pre);            beta = 0; pre read
///                  bias_grad += the column sums of C                (nullptr: the dGELU alone)
///   BiasGradB      C = alpha op(A) B + beta C;                      op_b = N (B is (k, n))
///                  bias_grad += the column sums of B (over its k rows)
///
/// Bias gradients are parameter gradients: acc_t<T> (fp32 for bf16), like every gradient the
/// backward writes (kernels::bias_backward). BiasGradB's C is a weight gradient and may be
/// acc_t<T> too (TC = float with bf16 A and B: the fp32-C GEMM of linalg::gemm_acc, so a
/// weight gradient accumulates unrounded); the other epilogues write activations, TC = T.
///
/// gelu is the tanh approximation (GPT-2's "gelu_new", kernels::gelu_forward), the one
/// cuBLASLt's GELU epilogues compute (PyTorch's unfused twin of its GELU epilogue is
/// gelu(approximate="tanh"), and llm.c fuses GPT-2's GELU the same way); selfcheck_paths
/// `epilogues.bias_gelu` checks on the device that the fp32 result is the tanh form and not
/// the erf one. The bias gradients accumulate (+=), like kernels::bias_backward.
///
/// Implementations (the same results to rounding; both deterministic):
/// - CUDA builds: one cublasLtMatmul with the epilogue (linalg/cublaslt_gemm.hpp), fp32 and
///   bf16 (and bf16 A/B with an fp32 C for BiasGradB). The epilogue works on the fp32
///   accumulator and rounds once; a bias gradient is written by cuBLASLt into a pool scratch
///   of C's type (cuBLASLt's bias type is the output's) and added into the acc_t<T> bias_grad
///   by one small kernel: BiasGradB of a weight gradient in fp32 is fp32 throughout;
///   DGeluBiasGrad, whose output dh is a bf16 activation, rounds each call's bias gradient to
///   bf16 once before it is added (never a running sum).
/// - The GEMM then ONE pass of the epilogue (kernels::add_bias, bias_gelu_forward,
///   gelu_backward_bias_grad, bias_backward): host builds (the host twin: CBLAS, then the pass
///   on the host threads), and on CUDA builds every call cuBLASLt refuses (fp64, an aux leading
///   dimension that is not a multiple of 8, a bias or pre-activation pointer not 16-byte
///   aligned, a shape without an algorithm), each distinct reason logged once. This form
///   rounds the GEMM's result to T before the epilogue, exactly like the unfused kernels, so
///   on host builds gpu.epilogues changes no bit.

#include "linalg/gemm.hpp"

namespace meshtrain::linalg {

enum class Epilogue { Bias, BiasGelu, DGeluBiasGrad, BiasGradB };

/// The epilogue's own operands (device pointers; unused ones stay null).
template <class T>
struct EpilogueOperands {
  const T* bias = nullptr;  ///< Bias, BiasGelu: (n)
  T* pre = nullptr;         ///< BiasGelu: the pre-activation, written; DGeluBiasGrad: read
  int ld_pre = 0;           ///< row stride of pre (>= n)
  acc_t<T>* bias_grad = nullptr;  ///< DGeluBiasGrad, BiasGradB: (n), accumulated; nullptr: not computed
};

/// Which implementation a call took (selfcheck_paths and the tests ask; the model does not).
enum class EpilogueImpl {
  Fused,         ///< one cuBLASLt matmul with the epilogue (CUDA builds)
  GemmThenPass,  ///< linalg::gemm, then one Kokkos pass (host builds; cuBLASLt's refusals)
};
/// Auto: Fused where the build and cuBLASLt allow, else GemmThenPass. GemmThenPass: that form
/// on every build (selfcheck_paths compares the two on the device).
enum class EpiloguePath { Auto, GemmThenPass };

/// T = float, double or bf16 (double always takes GemmThenPass); TC = T, or acc_t<T> for
/// BiasGradB (a weight gradient in the accumulation type).
template <class T, class TC = T>
EpilogueImpl gemm_epilogue(Epilogue epilogue, Op op_a, Op op_b, int m, int n, int k, float alpha, const T* a,
                           int lda, const T* b, int ldb, float beta, TC* c, int ldc, const EpilogueOperands<T>& x,
                           EpiloguePath path = EpiloguePath::Auto);

/// "Bias", "BiasGelu", "DGeluBiasGrad", "BiasGradB".
const char* epilogue_name(Epilogue e);

/// True when this build has the fused form (CUDA builds: cuBLASLt).
bool gemm_epilogue_fused_built();

}  // namespace meshtrain::linalg
