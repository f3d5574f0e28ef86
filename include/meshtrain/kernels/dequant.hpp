#pragma once
/// \brief Dequantization of a quantized frozen base (model.base_quant, issue 32) into the
/// compute dtype: the all-gathered NF4 or int8 payload of one FSDP unit's frozen segment
/// becomes the T values the blocks read, just before the unit's forward/backward.
///
/// The segment (numel elements, a multiple of 64) is `numel / shard_numel` shards laid end
/// to end; shard s's payload starts at byte s * payload_stride of `payload`:
///   nf4:  codes (shard_numel / 2 bytes, two weights a byte, the first in the high nibble)
///         | scales (shard_numel / 64 bytes, one 8-bit absmax code a block);
///   int8: codes (shard_numel signed bytes) | absmax (shard_numel / 64 float32).
/// 64-element blocks of the segment map to blocks of global tensors through `runs`
/// (sorted by local_block, disjoint); blocks outside every run (padding, and the 1-D
/// parameters kept in T) come out as 0. An NF4 block's scale is
/// scale * (group_max[run.group_base + global_block / 256] / 255), as formats::nf4.

#include <cstdint>

#include "core/bf16.hpp"

namespace meshtrain::kernels {

/// Consecutive 64-element blocks [local_block, local_block + n_blocks) of a unit's frozen
/// segment that are the consecutive blocks global_block, global_block + 1, ... of one global
/// tensor (row-major); that tensor's group maxima start at group_base in the unit's table.
struct QuantRun {
  std::int64_t local_block = 0;
  std::int64_t n_blocks = 0;
  std::int64_t global_block = 0;
  std::int64_t group_base = 0;
};

/// out (numel) = the NF4 segment; runs (n_runs) and group_max are device pointers.
template <class T>
void dequantize_nf4(const std::uint8_t* payload, std::int64_t payload_stride, std::int64_t shard_numel,
                    const QuantRun* runs, int n_runs, const float* group_max, T* out, std::int64_t numel);

/// out (numel) = the int8 segment; runs (n_runs) is a device pointer.
template <class T>
void dequantize_int8(const std::uint8_t* payload, std::int64_t payload_stride, std::int64_t shard_numel,
                     const QuantRun* runs, int n_runs, T* out, std::int64_t numel);

}  // namespace meshtrain::kernels
