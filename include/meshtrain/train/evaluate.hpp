#pragma once
/// \brief The evaluation loop shared by training (val_loss) and `meshtrain eval`: mean
/// cross-entropy over a fixed set of windows, split over the data-parallel ranks exactly
/// like training batches, so every mesh evaluates the same windows and gets the same mean.

#include <cstdint>

#include "data/sampler.hpp"
#include "train/dpo.hpp"
#include "train/session.hpp"
#include "train/token_batch.hpp"

namespace meshtrain::train {

/// Which windows an evaluation covers. Micro-batch b of dp rank d starts at window
/// b * micro_batch * dp + d * micro_batch; windows at or past `windows` (the padding of the
/// last micro-batch when the window count is not a multiple of micro_batch * dp) still run,
/// so every rank takes part in every collective, but their targets are masked out.
struct EvalWindows {
  long long micro_batches = 0;  ///< micro-batches per dp rank
  std::uint64_t windows = 0;    ///< windows evaluated over all ranks, padding excluded
  bool masked = false;          ///< loss-masked data (instruction/chat): the mean is over the counted targets
  /// train.objective = dpo or simpo: the windows are preference pairs (micro_batch even), the
  /// loss is `pair_loss`'s, the mean over the evaluated pairs (train/dpo.hpp).
  bool preference = false;
  PreferenceLoss pair_loss;
  /// DPO without LoRA: the stored reference log-probability of each row of the split
  /// (train/reference_logps.hpp); null: the base with the adapters off.
  const std::vector<double>* reference_rows = nullptr;
};

/// train.eval_batches global batches of `per_micro` windows (micro_batch x dp) each, as the
/// trainer's val_loss and `meshtrain eval` without --batches read them -- or, when that is
/// more windows than the split holds (`split_windows`; 0 = no end, random data), every
/// window of the split once: the windows past the split would wrap around to shifted copies
/// of the first ones and count their tokens twice. `clamped` says which.
EvalWindows eval_batches_windows(int eval_batches, int grad_accum, std::uint64_t per_micro, std::uint64_t split_windows,
                                 bool* clamped = nullptr);

struct EvalResult {
  double loss = 0;    ///< mean cross-entropy per counted target, nats (DPO: its loss per pair); same on every rank
  double tokens = 0;  ///< targets counted, all ranks
  DpoMetrics dpo;     ///< with EvalWindows::preference: the pairs' means
};

/// Runs the forward passes and reduces the loss over the world. A token id outside the
/// vocabulary (checked as the sampler reads it) becomes the same UserError on every rank.
/// `token_batch` is the staging buffer (micro_batch x seq_len of the session's run).
template <class T>
EvalResult evaluate(Session<T>& session, const data::EvalSampler& sampler, const EvalWindows& w,
                    TokenBatch& token_batch);

}  // namespace meshtrain::train
