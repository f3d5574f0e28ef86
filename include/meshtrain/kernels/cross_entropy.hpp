#pragma once
/// \brief Fused softmax cross-entropy over (possibly vocab-parallel) logits, in three
/// phases so tensor parallelism can reduce between them without gathering the logits:
///
///   1. row_max  = max over local columns          -> all_reduce(MAX) over tp
///   2. row_sum  = sum exp(l - row_max) over local columns, row_tgt = target logit if the
///                 target is in this slice else 0  -> all_reduce(SUM) over tp of [row_sum|row_tgt]
///   3. loss_i   = log(row_sum) + row_max - row_tgt; logits overwritten IN PLACE by
///                 grad_scale * (softmax - onehot)
///
/// logits: (N, V_local; ld) for vocab ids [vocab_start, vocab_start + V_local). Columns with
/// id >= valid_vocab (padding) are treated as -inf. targets: (N) int32; a negative target
/// is ignored (loss 0, gradient 0). A row whose slice holds no valid column gets
/// row_max = -inf and sum 0 (the tp reductions then combine them correctly).
///
/// The one-pass form of phases 1-2 (gpu.fused_loss) is kernels/cross_entropy_online.hpp.

#include <cstdint>

#include "core/bf16.hpp"

namespace meshtrain::kernels {

template <class T>
void cross_entropy_row_max(const T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                           std::int64_t valid_vocab, float* row_max);

/// stats: (2N) floats: [0, N) = sum of exp, [N, 2N) = target logit.
template <class T>
void cross_entropy_row_sums(const T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                            std::int64_t valid_vocab, const std::int32_t* targets,
                            const float* row_max, float* stats);

/// Writes dlogits into `logits` (in place) scaled by grad_scale, and by row_scale[r] (device,
/// (N)) when row_scale is not null (DPO: a per-sequence coefficient, negative for a rejected
/// response); returns the sum over rows of the per-row loss (double; ignored rows contribute 0).
template <class T>
double cross_entropy_finish(T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                            std::int64_t valid_vocab, const std::int32_t* targets,
                            const float* row_max, const float* stats, float grad_scale,
                            const float* row_scale = nullptr);

/// cross_entropy_finish with the loss left on the device: the sum over rows of the per-row
/// loss is written to the device scalar *loss_out (overwritten), with no host read. The
/// statistics are acc_t<T> (float for float and bf16 logits, double for double).
template <class T>
void cross_entropy_finish_into(T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                               std::int64_t valid_vocab, const std::int32_t* targets,
                               const acc_t<T>* row_max, const acc_t<T>* stats, float grad_scale,
                               const float* row_scale, double* loss_out);

/// Loss only (evaluation): sum over rows of the per-row loss; logits untouched.
double cross_entropy_loss_sum(int N, const std::int32_t* targets, const float* row_max,
                              const float* stats);
/// Loss of each row (device, (N); 0 for an ignored row), logits untouched: the
/// -log p(target) that DPO sums per sequence.
void cross_entropy_row_losses(int N, const std::int32_t* targets, const float* row_max, const float* stats,
                              float* losses);

/// \brief Double-precision statistics for double logits (gradient checks): the same three
/// phases with row_max and stats in double, so the loss is accurate to double rounding
/// (fp32 statistics limit it to ~1e-7 relative). Overloads, chosen by the stats pointer type.
void cross_entropy_row_max(const double* logits, int ld, int N, int V_local,
                           std::int64_t vocab_start, std::int64_t valid_vocab, double* row_max);
void cross_entropy_row_sums(const double* logits, int ld, int N, int V_local,
                            std::int64_t vocab_start, std::int64_t valid_vocab,
                            const std::int32_t* targets, const double* row_max, double* stats);
double cross_entropy_finish(double* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                            std::int64_t valid_vocab, const std::int32_t* targets,
                            const double* row_max, const double* stats, float grad_scale,
                            const float* row_scale = nullptr);
double cross_entropy_loss_sum(int N, const std::int32_t* targets, const double* row_max,
                              const double* stats);
void cross_entropy_row_losses(int N, const std::int32_t* targets, const double* row_max, const double* stats,
                              double* losses);

}  // namespace meshtrain::kernels
