#pragma once
/// \brief LayerNorm (GPT-2) and RMSNorm (Llama) over the last dimension C.
/// Saved statistics are in acc_t<T>: mean and rstd (LayerNorm), rstd (RMSNorm).

#include <cstddef>
#include <initializer_list>

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
///   form. It moves rows in 16-byte packs (8 bf16, 4 float or 2 double per load and store:
///   a warp's lanes read 512 contiguous bytes per instruction) when every row of the tensors
///   it reads and writes starts on a 16-byte boundary (norm_rows_packable), element by
///   element otherwise; kernel names end in `_warps16` and `_warps`.
///
/// The build's default (`default_norm_form()`) is Rows on host builds, Warps on GPUs. Either
/// form runs on any build, so the CPU suite tests the GPU form on the host against the same
/// references; the forms agree within fp32 rounding (another summation order).
enum class NormForm { Rows, Warps };
NormForm default_norm_form();

/// The Warps form's pack: 16 bytes (one 128-bit load or store on GPUs).
inline constexpr std::size_t kNormPackBytes = 16;

/// Every norm function (these and kernels/residual_norms.hpp's) takes, after its form,
/// `row_packs` (gpu.row_packs): false keeps the Warps form element by element even where the
/// rows could be moved in packs.
///
/// True when rows of C elements of `elem_bytes` bytes can be moved in kNormPackBytes packs:
/// C * elem_bytes is a multiple of kNormPackBytes and every base pointer that is not null is
/// kNormPackBytes-aligned (so every row of every tensor starts on such a boundary). The
/// Warps form checks it on the tensors of each call; packed or not, its values agree within
/// rounding (the lanes' partial sums group elements differently).
bool norm_rows_packable(int C, std::size_t elem_bytes, std::initializer_list<const void*> bases);

/// y (N, C) = (x - mean) * rstd * w + b;  mean, rstd: (N) saved for backward.
template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, double eps, int N, int C, T* y,
                       acc_t<T>* mean, acc_t<T>* rstd, NormForm form = default_norm_form(), bool row_packs = true);

/// dx (N, C) += dL/dx (ACCUMULATES: the residual stream's gradient is already in dx);
/// dw, db (C) += parameter gradients, in acc_t<T> (fp32 for bf16: gradients accumulate
/// unrounded across micro-steps), deterministic, no atomics; both nullptr: frozen, skipped.
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* mean,
                        const acc_t<T>* rstd, int N, int C, T* dx, acc_t<T>* dw, acc_t<T>* db,
                        NormForm form = default_norm_form(), bool row_packs = true);

/// y (N, C) = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps): (N) saved.
template <class T>
void rmsnorm_forward(const T* x, const T* w, double eps, int N, int C, T* y, acc_t<T>* rstd,
                     NormForm form = default_norm_form(), bool row_packs = true);

/// dx (N, C) += dL/dx (ACCUMULATES); dw (C, acc_t<T>) += (deterministic); dw nullptr:
/// frozen, skipped.
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* rstd, int N, int C,
                      T* dx, acc_t<T>* dw, NormForm form = default_norm_form(), bool row_packs = true);

}  // namespace meshtrain::kernels
