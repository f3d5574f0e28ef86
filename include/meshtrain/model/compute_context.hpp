#pragma once
/// \brief What a layer needs from its surroundings: the tensor-parallel group (for the
/// all-reduces of row-parallel outputs and column-parallel input gradients), a progress hook
/// the FSDP engine uses to drive prefetches while compute runs, and the run's kernel choices.

#include <cstddef>
#include <functional>

#include "comm/communicator.hpp"
#include "kernels/attention.hpp"

namespace meshtrain::model {

struct ComputeContext {
  Communicator* tp = nullptr;         ///< tensor-parallel group; nullptr or size 1 = no TP
  std::function<void()> progress;     ///< called between kernels (may be empty)
  /// LoRA adapters switched off: the forward computes the frozen base alone (DPO's
  /// reference model, the same weights without a second copy). Forward only.
  bool adapters_off = false;
  /// Training attention's implementation (gpu.attention; kernels/attention.hpp).
  kernels::AttentionPath attention = kernels::AttentionPath::Kokkos;

  int tp_size() const { return tp ? tp->size() : 1; }
  void poll() const {
    if (progress) progress();
  }
  /// In-place sum over the tp group (no-op without TP).
  template <class T>
  void tp_all_reduce(T* data, std::size_t n, ReduceOp op = ReduceOp::Sum) const {
    if (tp && tp->size() > 1) tp->all_reduce(data, data, n, DTypeOf<T>::value, op);
  }
};

}  // namespace meshtrain::model
