#pragma once
/// \brief Flat layouts: one FSDP unit's TP-local parameters laid end to end in one buffer
/// (offsets aligned), in two segments that each split evenly into `shards` contiguous shards:
///
///   unit buffer: [ frozen segment            | trainable segment               ]
///                [ f0 | pad | f1 | ... | pad | p0 | pad | p1 | ... | tail pad ]
///                 frozen_padded()            trainable_padded()
///   rank s owns [s * frozen_shard_numel, (s+1) * frozen_shard_numel) of the frozen segment
///   and frozen_padded() + [s * shard_numel, (s+1) * shard_numel) of the trainable one.
///
/// Frozen parameters (the base model under LoRA) have no gradients, no optimizer state and
/// no fp32 master: the FSDP engine keeps their shards in the compute type, and gradient
/// buffers, reductions and moments cover the trainable segment only. Without frozen
/// parameters the frozen segment is empty and the layout is the plain one.

#include <cstdint>
#include <string>
#include <vector>

#include "model/param_spec.hpp"

namespace meshtrain::model {

struct ParamSlot {
  int spec = 0;                          ///< index into the spec list
  std::int64_t offset = 0;               ///< element offset in the unit buffer
  std::int64_t numel = 0;                ///< TP-local elements
  std::vector<std::int64_t> local_shape;
};

struct UnitLayout {
  int unit = 0;
  std::vector<ParamSlot> slots;
  std::int64_t numel = 0;               ///< end of the last parameter
  std::int64_t frozen_shard_numel = 0;  ///< frozen-segment elements per shard (0: nothing frozen)
  std::int64_t shard_numel = 0;         ///< trainable-segment elements per shard
  int shards = 1;
  std::int64_t frozen_padded() const { return frozen_shard_numel * shards; }
  /// First element of the trainable segment: gradients are indexed from here.
  std::int64_t trainable_begin() const { return frozen_padded(); }
  std::int64_t trainable_padded() const { return shard_numel * shards; }
  /// The whole (gathered) unit buffer.
  std::int64_t padded() const { return frozen_padded() + trainable_padded(); }

  /// The slot whose spec has this role; nullptr when absent (e.g. untied head).
  const ParamSlot* find(const std::vector<ParamSpec>& specs, const std::string& role) const;
};

/// Element alignment of parameter offsets and shard boundaries (256 bytes of bf16/fp32
/// covers GPU GEMM alignment and cache lines).
inline constexpr std::int64_t kFlatAlign = 64;

/// Layouts of units 0..n_layers for the given tp degree and shard-group size.
std::vector<UnitLayout> build_layouts(const std::vector<ParamSpec>& specs, int num_units, int tp,
                                      int shards);

/// Number of FSDP units of a model: outer unit + one per block.
inline int num_units(const ModelDims& d) { return 1 + d.n_layers; }

}  // namespace meshtrain::model
