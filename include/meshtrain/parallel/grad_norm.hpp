#pragma once
/// \brief The true global gradient norm: every logical element counted exactly once across
/// shard, replicate and tensor-parallel groups (owned ranges x tp-counted parameters),
/// summed over the world. Every rank gets the same value.

#include "comm/communicator.hpp"
#include "parallel/fsdp.hpp"

namespace meshtrain::parallel {

template <class T>
double global_grad_norm(FsdpEngine<T>& engine, Communicator& world);

/// Sets every gradient of the rank's state to `value` (train.inject_nan_steps: NaN).
template <class T>
void poison_gradients(FsdpEngine<T>& engine, double value);

}  // namespace meshtrain::parallel
