#pragma once
/// \brief Learning-rate schedule: linear warmup to train.lr over warmup_steps, then cosine
/// decay to train.min_lr at the last step (or constant).

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
