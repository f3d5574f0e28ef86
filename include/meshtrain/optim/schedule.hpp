#pragma once
/// \brief Learning-rate schedule: linear warmup to train.lr over warmup_steps, then cosine
/// decay that reaches train.min_lr one step past the last (0-based step total_steps) and
/// stays there, or constant. The formula is in doc/training.md.

#include <string>

namespace meshtrain::optim {

struct LrSchedule {
  double lr = 3e-4, min_lr = 3e-5;
  int warmup_steps = 0, total_steps = 1;
  bool cosine = true;
  /// Learning rate of 0-based step `step`.
  double at(int step) const;
};

}  // namespace meshtrain::optim
