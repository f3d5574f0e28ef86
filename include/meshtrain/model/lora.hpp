#pragma once
/// \brief LoRA adapter math for one projection: y += s * (x A^T) B^T with A (r, in) and
/// B (out, r), s = alpha / r. The base projection's tensor parallelism decides the form:
///   column-parallel (output split): x is replicated, B is this rank's slice of the output
///     rows, u = x A^T is complete locally;
///   row-parallel (input split): x and A are this rank's input slices, u = x A^T is partial
///     and summed over tp, and only tp rank 0 adds the term to the (still partial) output.
/// The backward is the same for both: from dy (the output gradient, full on every rank for
/// row-parallel, this rank's slice for column-parallel) it accumulates dB, dA and dx.

#include "core/bf16.hpp"
#include "model/compute_context.hpp"

namespace meshtrain::model {

struct LoraShape {
  int N = 0;       ///< tokens
  int in = 0;      ///< input width held by this rank (local for row-parallel)
  int out = 0;     ///< output width held by this rank
  int r = 0;       ///< rank
  float scale = 1; ///< alpha / r
};

/// u (N, r) <- x (N, in; ldx) A^T; y (N, out; ldy) += scale * u B^T.
template <class T>
void lora_forward_column(const LoraShape& s, const T* x, int ldx, const T* A, const T* B, T* y, int ldy, T* u);

/// As above with u summed over tp, and the output term added on tp rank 0 only.
template <class T>
void lora_forward_row(const ComputeContext& ctx, int tp_rank, const LoraShape& s, const T* x, int ldx, const T* A,
                      const T* B, T* y, int ldy, T* u);

/// dB (out, r) += scale dy^T u; du = scale dy B; dA (r, in) += du^T x; dx (N, in; lddx) += du A.
/// du: (N, r) scratch. dA and dB are acc_t<T> (fp32 for bf16: linalg::gemm_acc).
template <class T>
void lora_backward(const LoraShape& s, const T* x, int ldx, const T* A, const T* B, const T* dy, int lddy, const T* u,
                   acc_t<T>* dA, acc_t<T>* dB, T* dx, int lddx, T* du);

}  // namespace meshtrain::model
