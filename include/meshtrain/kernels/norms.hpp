#pragma once
/// \brief LayerNorm (GPT-2) and RMSNorm (Llama) over the last dimension C.
/// Saved statistics are in acc_t<T>: mean and rstd (LayerNorm), rstd (RMSNorm).

#include "core/bf16.hpp"

namespace meshtrain::kernels {

/// \brief How the norm kernels (these and kernels/residual_norms.hpp's) spread rows over the
/// execution space.
///
/// - Rows: one team per row (the fused backward: per kNormRowBlock rows). On host builds the
///   team is one thread and the loops vectorize; the host form.
/// - Warps: one warp per row (the fused backward: per kWarpRowBlock rows), reducing with lane
///   shuffles (kernel_common.hpp's warp rows). A team per row reduces with team barriers
///   between a row's passes, and the fused backward's Rows form runs only a few hundred teams
///   that each walk 64 rows; warps keep thousands of rows in flight without barriers. The GPU
///   form.
///
/// The build's default (`default_norm_form()`) is Rows on host builds, Warps on GPUs. Either
/// form runs on any build, so the CPU suite tests the GPU form on the host against the same
/// references; the forms agree within fp32 rounding (another summation order).
enum class NormForm { Rows, Warps };
NormForm default_norm_form();

/// y (N, C) = (x - mean) * rstd * w + b;  mean, rstd: (N) saved for backward.
template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, double eps, int N, int C, T* y,
                       acc_t<T>* mean, acc_t<T>* rstd, NormForm form = default_norm_form());

/// dx (N, C) += dL/dx (ACCUMULATES: the residual stream's gradient is already in dx);
/// dw, db (C) += parameter gradients, in acc_t<T> (fp32 for bf16: gradients accumulate
/// unrounded across micro-steps), deterministic, no atomics; both nullptr: frozen, skipped.
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* mean,
                        const acc_t<T>* rstd, int N, int C, T* dx, acc_t<T>* dw, acc_t<T>* db,
                        NormForm form = default_norm_form());

/// y (N, C) = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps): (N) saved.
template <class T>
void rmsnorm_forward(const T* x, const T* w, double eps, int N, int C, T* y, acc_t<T>* rstd,
                     NormForm form = default_norm_form());

/// dx (N, C) += dL/dx (ACCUMULATES); dw (C, acc_t<T>) += (deterministic); dw nullptr:
/// frozen, skipped.
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* rstd, int N, int C,
                      T* dx, acc_t<T>* dw, NormForm form = default_norm_form());

}  // namespace meshtrain::kernels
