#pragma once
/// \brief Residual add fused with the norm that follows it (gpu.fused_norms): in a block,
/// `h = sublayer_out (+ bias) + residual; y = norm(h)` in one kernel writing h, y and the
/// saved statistics, and a one-pass backward. LayerNorm (GPT-2) and RMSNorm (Llama); the
/// unfused path is kernels/elementwise.hpp's add_bias + add_inplace, then kernels/norms.hpp.
///
/// Forward: per row, h is rounded to T after the bias add and after the residual add, as the
/// unfused kernels do, and the statistics are taken from the stored h in the same order: on
/// host builds the forward is bitwise the unfused path.
///
/// Backward: per row the norm's input gradient is added to dx (which holds the residual
/// stream's gradient); in the same pass each block of rows (kNormRowBlock in the Rows form,
/// kWarpRowBlock in the Warps form: kernels/norms.hpp's NormForm) accumulates its partial sums of the
/// parameter gradients (dw, db of the norm, and dbias = the column sums of the final dx: the
/// gradient of the bias added in forward; on host builds each row's dx and each partial row
/// are separate loops over the row, which vectorize, where one loop storing all four did not:
/// perf/README.md, "Fused LayerNorm backward on CPU"). A second, small kernel adds the
/// blocks' partials per column in block order (the Warps form: in chunks of blocks, then the
/// chunks in order). Block boundaries do not depend on the thread count or the device, so
/// results are bitwise reproducible run to run; they equal the unfused path's row-order
/// column sums up to fp32 rounding (another association).

#include <cstdint>

#include "core/bf16.hpp"
#include "kernels/norms.hpp"  // NormForm

namespace meshtrain::kernels {

/// Rows per block of the fused backward's parameter-gradient partials (the Rows form).
inline constexpr int kNormRowBlock = 64;
/// Rows per warp of the Warps form's backward (one partial row per kWarpRowBlock rows).
inline constexpr int kWarpRowBlock = 8;

/// h (N, C) <- h + bias (C, or null) + residual (N, C); y (N, C) = (h - mean) * rstd * w + b;
/// mean, rstd: (N) saved for backward.
template <class T>
void residual_layernorm_forward(T* h, const T* residual, const T* bias, const T* w, const T* b, double eps, int N,
                                int C, T* y, acc_t<T>* mean, acc_t<T>* rstd, NormForm form = default_norm_form(), bool row_packs = true);

/// dx (N, C) += dL/dh through the LayerNorm (ACCUMULATES); dw, db (C) += the LayerNorm's
/// parameter gradients; dbias (C) += column sums of the resulting dx. Each null: skipped.
/// The parameter gradients are acc_t<T> (fp32 for bf16 compute).
template <class T>
void residual_layernorm_backward(const T* dy, const T* h, const T* w, const acc_t<T>* mean, const acc_t<T>* rstd,
                                 int N, int C, T* dx, acc_t<T>* dw, acc_t<T>* db, acc_t<T>* dbias,
                                 NormForm form = default_norm_form(), bool row_packs = true);

/// h (N, C) <- h + residual; y (N, C) = h * rstd * w; rstd (N) saved.
template <class T>
void residual_rmsnorm_forward(T* h, const T* residual, const T* w, double eps, int N, int C, T* y, acc_t<T>* rstd,
                              NormForm form = default_norm_form(), bool row_packs = true);

/// dx (N, C) += dL/dh through the RMSNorm (ACCUMULATES); dw (C, acc_t<T>) += (null: skipped).
template <class T>
void residual_rmsnorm_backward(const T* dy, const T* h, const T* w, const acc_t<T>* rstd, int N, int C, T* dx,
                               acc_t<T>* dw, NormForm form = default_norm_form(), bool row_packs = true);

}  // namespace meshtrain::kernels
