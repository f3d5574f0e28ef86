#pragma once
/// \brief AdamW over the FSDP engine's fp32 master shards and moments; weight decay per
/// parameter (never norms/biases; embeddings only with train.decay_embeddings).

#include "parallel/fsdp.hpp"

namespace meshtrain::optim {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  bool decay_embeddings = false;
};

/// One optimizer step on every unit's state range. `grad_scale` multiplies gradients
/// (the clipping coefficient); `step` is 1-based.
template <class T>
void adamw_update(parallel::FsdpEngine<T>& engine, const AdamWSettings& s, double lr, int step, double grad_scale);

}  // namespace meshtrain::optim
