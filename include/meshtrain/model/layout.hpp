#pragma once
/// \brief Flat layouts: one FSDP unit's TP-local parameters laid end to end in one buffer
/// (offsets aligned), padded so it splits evenly into `shards` contiguous shards.
///
///   unit buffer: [ p0 | pad | p1 | pad | ... | tail pad ]   padded = shards * shard_numel
///   rank s of the shard group owns [s * shard_numel, (s+1) * shard_numel)

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/model/param_spec.hpp"

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
  std::int64_t numel = 0;        ///< end of the last parameter
  std::int64_t shard_numel = 0;  ///< elements per shard
  int shards = 1;
  std::int64_t padded() const { return shard_numel * shards; }

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
