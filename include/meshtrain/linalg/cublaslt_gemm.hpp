#pragma once
/// \brief cuBLASLt matmuls with epilogues (linalg/gemm_epilogue.hpp) on device pointers,
/// row-major interface. Host code only: no CUDA headers here, so CPU builds on a machine with
/// the CUDA toolkit compile and link it as a check (test_cuda_link); CUDA builds call it from
/// linalg::gemm_epilogue.
///
/// Row-major C (m, n) = op(A) op(B) is column-major C^T (n, m) = op(B)^T op(A)^T, so cuBLASLt
/// sees A_lt = our B, B_lt = our A, M_lt = n, N_lt = m, and every vector along our columns
/// (bias, bias gradient: n) runs along the rows of cuBLASLt's D, as its BIAS, GELU_AUX_BIAS
/// and DGELU_BGRAD epilogues want ("bias vector length must match matrix D rows"). The aux
/// (pre-activation) matrix is column-major (n, m) with leading dimension ld_pre. Our BiasGradB
/// (the sums of our B over k) is therefore cuBLASLt's BGRADA ("bias gradient based on the
/// input matrix A; its size is the number of rows of D; the reduction is over k"), with
/// A_lt = our B untransposed: not BGRADB, which would sum our A.
///
/// Types: fp32 or bf16 A and B, C and D of the same type or fp32 C and D with bf16 A and B
/// (a weight gradient accumulated in fp32: cuBLASLt's 16BF x 16BF -> 32F combination),
/// CUBLAS_COMPUTE_32F, fp32 alpha/beta. The bias, the bias gradient and the GELU aux matrix
/// are in the output's type (cuBLASLt's default for every non-fp8 GEMM:
/// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE and the aux type stay unset), which is how the model
/// stores its biases and, for an fp32 output, how it accumulates their gradients. Alignment: cuBLASLt's heuristic assumes 256-byte
/// aligned matrices unless told otherwise, so each plan states the actual alignment of A, B,
/// C and D (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES); the bias and aux pointers must be
/// 16-byte aligned and the aux leading dimension a multiple of 8 (else: refused, fallback).
///
/// Plans (matmul descriptor, layouts, the heuristic's algorithm and workspace size) are made
/// once per (types, epilogue, transposes, m, n, k, leading dimensions, pointer alignments,
/// beta == 0) and cached for the process; a call sets the pointers on the cached descriptor
/// and queues one cublasLtMatmul on `stream`. The caller provides the workspace
/// (workspace_bytes), from the memory pool.

#include <cstddef>
#include <cstdint>
#include <string>

#include "linalg/cublas_gemm.hpp"
#include "linalg/gemm_epilogue.hpp"

namespace meshtrain::linalg::cublaslt {

/// One call, row-major (see linalg::gemm_epilogue): type F32 or BF16 (A and B, and C and D
/// unless fp32_output). For DGeluBiasGrad and BiasGradB `bias` is the bias-gradient output
/// (n elements of the output's type, overwritten: the caller accumulates it), for Bias and
/// BiasGelu the bias input; `pre` the GELU aux matrix.
struct Call {
  cublas::Type type = cublas::Type::BF16;
  /// C and D in fp32 with bf16 A and B (BiasGradB only: a weight gradient kept in fp32).
  bool fp32_output = false;
  cublas::Type output_type() const { return fp32_output ? cublas::Type::F32 : type; }
  Epilogue epilogue = Epilogue::Bias;
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* c = nullptr;
  int ldc = 0;
  void* bias = nullptr;  ///< null for DGeluBiasGrad without a bias gradient (cuBLASLt's DGELU)
  void* pre = nullptr;
  int ld_pre = 0;
};

/// Plans the call (cached per shape and alignments): the device workspace bytes it needs, or
/// -1 when cuBLASLt does not take it, with the reason in *why_not (nothing was queued).
std::int64_t workspace_bytes(const Call& call, std::string* why_not);

/// Queues the planned call on `stream` (a cudaStream_t) with `workspace` (at least
/// workspace_bytes(call) bytes, device memory, 256-byte aligned).
void matmul(const Call& call, void* workspace, void* stream);

/// The largest workspace a plan may ask for (the heuristic's limit): 32 MiB, what cuBLAS
/// recommends for Hopper.
inline constexpr std::size_t kMaxWorkspaceBytes = std::size_t{32} << 20;

}  // namespace meshtrain::linalg::cublaslt
