#pragma once
/// \brief The one-pass (online-softmax) cross-entropy of gpu.fused_loss, the fused form of
/// kernels/cross_entropy.hpp's three phases, with the same operands and the same layout of
/// the statistics (row_max (N), stats (2N) = [sum exp | target logit]):
///
///   - tp = 1: cross_entropy_fused, one launch per chunk: per row one read of the logits for
///     the running max and rescaled sum-exp (and the target logit), then the gradient written
///     in place, the loss summed into a device scalar (no host read).
///   - tp > 1: cross_entropy_online_stats (one read per row) gives each slice's (max, sum)
///     pair; the pairs merge across tp ranks by the online-softmax rule
///     M = max_k m_k, S = sum_k s_k exp(m_k - M), done as the three-pass path's two
///     reductions: all_reduce(MAX) of row_max, cross_entropy_rescale_sums (s_k *= exp(m_k - M),
///     per row, no logits read), all_reduce(SUM) of stats; then cross_entropy_finish(_into).
///
/// Rows with a negative target are skipped (gradient 0, loss 0; statistics -inf / 0), columns
/// with id >= valid_vocab are padding (never read as logits). Kernels are portable Kokkos: on
/// host builds they are their own host twin. The result equals the three-pass path up to the
/// order of the fp32 sums (tests/kernels/test_cross_entropy_online.cpp states the tolerance).
///
/// On GPUs each thread of a row's team reads (and writes) its strided 16-byte packs of the
/// row where the rows allow it (cross_entropy_rows.hpp: ce_rows_packable), unless
/// `row_packs` (gpu.row_packs) is false; host builds go by blocks of the row either way.

#include <cstdint>

#include "core/bf16.hpp"

namespace meshtrain::kernels {

/// logits (N, V_local; ld) for vocab ids [vocab_start, vocab_start + V_local) -> local_max (N)
/// and row_max (N) both = this slice's max (row_max is the one reduced over tp), stats (2N) =
/// [sum exp(l - local max) | target logit or 0].
template <class T>
void cross_entropy_online_stats(const T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                                std::int64_t valid_vocab, const std::int32_t* targets, acc_t<T>* local_max,
                                acc_t<T>* row_max, acc_t<T>* stats, bool row_packs = true);

/// After all_reduce(MAX) of row_max: stats[r] (sum) *= exp(local_max[r] - row_max[r]), so that
/// all_reduce(SUM) of stats then gives the sum of exp(l - row_max) over the whole vocabulary.
template <class S>
void cross_entropy_rescale_sums(int N, const S* local_max, const S* row_max, S* stats);

/// tp = 1 (the whole vocabulary in this slice): statistics, gradient grad_scale * row_scale[r]
/// * (softmax - onehot) written into `logits` in place, and the sum over rows of the per-row
/// loss written to the device scalar *loss_out (overwritten), in one launch.
template <class T>
void cross_entropy_fused(T* logits, int ld, int N, int V_local, std::int64_t valid_vocab,
                         const std::int32_t* targets, float grad_scale, const float* row_scale,
                         double* loss_out, bool row_packs = true);

}  // namespace meshtrain::kernels
