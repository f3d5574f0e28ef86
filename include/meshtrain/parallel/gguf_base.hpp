#pragma once
/// \brief A frozen base kept in its GGUF file's own quantization (model.base_quant=gguf,
/// issue 32): which bytes of the file one FSDP unit's TP-local frozen segment holds, how
/// they are divided into the dp_shard ranks' shards, and where each lands when the
/// gathered payload is dequantized (kernels::dequantize_gguf). No value is ever
/// re-quantized and no fp32 copy of a tensor exists: a rank's shard is the file's blocks,
/// read from the mapped file (checkpoint/load.cpp), all-gathered as bytes and dequantized
/// into the gathered unit in the compute dtype just before its compute.
///
/// Blocks and shards: a ggml block is 32 (Q4_0, Q4_1, Q8_0) or 256 (Q4_K, Q6_K) weights of
/// one row, or one weight (F32, F16, BF16). A unit's shards are element ranges of 64-element
/// multiples (model::kFlatAlign), so a 256-weight block may straddle two of them; each block
/// belongs to the shard that holds its first element (the layout is left as it is). The
/// shards' payloads then differ in size by a few blocks: every rank sends `stride` bytes,
/// the largest shard's (8-aligned), the rest of a smaller shard's being zeros.
///
/// Tensor parallelism: a rank holds whole file rows (row-parallel splits: q|k|v, gate|up,
/// the vocabulary) or a slice of each row (o_proj, down_proj); a slice must cover whole
/// blocks, else a UserError names the tensor, the block size and the fix (a tp that divides
/// its columns into whole blocks, or model.base_quant=nf4, which re-quantizes the file's
/// values into 64-weight blocks of the global tensor, or none). No tensor silently falls
/// back to another storage.
///
/// 1-D tensors (norm weights) stay in the compute dtype on every rank, whole, as with nf4
/// (`dense` slots). The rows a file lacks (vocabulary padding) are runs of zeros.

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/dequant_gguf.hpp"
#include "model/layout.hpp"
#include "model/model_dims.hpp"
#include "model/outer_params.hpp"

namespace meshtrain::parallel {

/// One unit's frozen segment on one tp rank, as its GGUF blocks.
struct GgufMap {
  /// Every element of the segment outside `dense`, in element order (and so group order):
  /// runs of whole blocks, and runs of zeros (alignment padding, absent rows). A run's
  /// `byte` is its first block in the gathered payload: shard * stride + its shard offset.
  std::vector<kernels::GgufRun> runs;
  /// Where each run's blocks come from (parallel to runs): spec -1 for a run of zeros.
  struct Source {
    int spec = -1;                ///< index into the spec list
    std::int64_t global = 0;      ///< first element of the run in the global tensor (row-major)
    int shard = 0;                ///< the dp_shard rank whose payload holds its blocks
    std::int64_t shard_byte = 0;  ///< offset of its first block in that shard's payload
    std::int64_t bytes = 0;       ///< bytes of its blocks
  };
  std::vector<Source> sources;
  std::vector<model::DenseSlot> dense;  ///< the 1-D slots of the segment, kept in T (whole on every rank)
  std::vector<std::int64_t> shard_bytes;  ///< payload bytes of each shard's blocks
  std::int64_t stride = 0;                ///< bytes every shard sends: the largest shard's, 8-aligned
  std::int64_t groups = 0;                ///< the kernel's groups over all runs
  std::int64_t dense_numel() const;
  /// The kernel's groups [first, second) that cover elements [first, last) of the segment
  /// (a part of a unit dequantized alone: rows of an embedding, a chunk of a head).
  std::pair<std::int64_t, std::int64_t> groups_of(std::int64_t first, std::int64_t last) const;
};

/// The map of unit layout L (`L.shards` shards) for tp rank `tp_rank` of `tp`, every frozen
/// matrix kept as `formats` says (by name). UserError naming the tensor when a frozen matrix
/// has no format or a type the kernel does not decode, or when its TP slice splits a block.
GgufMap build_gguf_map(const std::vector<model::ParamSpec>& specs, const model::UnitLayout& L, int tp, int tp_rank,
                       const model::BaseFormats& formats);

}  // namespace meshtrain::parallel
