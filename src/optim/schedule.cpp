#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace meshtrain::optim {

double LrSchedule::at(int step) const {
  if (warmup_steps > 0 && step < warmup_steps) return lr * (step + 1) / warmup_steps;
  if (!cosine) return lr;
  const int decay_steps = std::max(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / decay_steps);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.141592653589793 * progress));
}

}  // namespace meshtrain::optim
