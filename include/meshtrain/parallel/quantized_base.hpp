#pragma once
/// \brief The canonical quantization of a frozen base (model.base_quant = nf4 | int8,
/// issue 32) on any mesh: which 64-weight blocks of one FSDP unit's TP-local frozen
/// segment are which blocks of which global tensor, and the encoding of one rank's shard.
///
/// Mesh independence: the quantization is defined per global tensor in its row-major
/// order -- blocks of 64 consecutive global elements (formats::nf4::kBlock), NF4's scale
/// groups of 256 consecutive global blocks -- so a weight's dequantized value is a function
/// of the global tensor alone, whatever the tp degree and the FSDP shards. A unit's slots
/// start on 64-element boundaries (model::kFlatAlign) and its shards are multiples of 64,
/// so every local block lies in one shard; a TP slice must cover whole global blocks
/// (checked here: a UserError names the tensor otherwise). A rank computes the absmax of
/// its own blocks; a group's maximum spans ranks, so it is the maximum over the world
/// (FsdpEngine::set_frozen) of the partial maxima in a per-unit table every rank holds.
///
/// 1-D tensors (norm weights, biases) stay in the compute dtype, as bitsandbytes keeps
/// them: they are `dense` slots, outside every run. Embeddings and the LM head are
/// matrices and are quantized too, unless model.base_quant_embeddings is false: then the
/// outer unit, which holds exactly them and the final norm, is not quantized at all
/// (unit_base_quant), as bitsandbytes, PEFT and torchtune keep them.

#include <cstdint>
#include <vector>

#include "config/choices.hpp"
#include "kernels/dequant.hpp"
#include "model/layout.hpp"
#include "model/outer_params.hpp"

namespace meshtrain::parallel {

/// One unit's frozen segment on one tp rank, as the quantization sees it.
struct QuantMap {
  std::vector<kernels::QuantRun> runs;  ///< quantized blocks, sorted by local_block
  std::int64_t groups = 0;              ///< NF4 group maxima of the unit's quantized tensors (table size)
  std::vector<model::DenseSlot> dense;  ///< the 1-D slots of the segment, kept in T
  std::int64_t dense_numel() const;
};

/// How unit `unit`'s frozen segment is stored: `quant`, except the outer unit (unit 0:
/// embeddings, final norm, LM head) when `quant_embeddings` is false, which stays in T.
BaseQuant unit_base_quant(BaseQuant quant, bool quant_embeddings, int unit);

/// The map of unit layout L for tp rank `tp_rank` of `tp`. UserError naming the tensor when
/// a quantized tensor's TP slice does not cover whole 64-weight global blocks, or a slot
/// does not start on a block.
QuantMap build_quant_map(const std::vector<model::ParamSpec>& specs, const model::UnitLayout& L, int tp, int tp_rank,
                         BaseQuant quant);

/// Bytes of one shard's payload (the all-gather's count per rank): nf4 codes + 8-bit scales,
/// int8 codes + float32 absmax (kernels/dequant.hpp).
std::int64_t payload_bytes(BaseQuant quant, std::int64_t shard_numel);

/// Elements [begin, begin + numel) of the segment, this rank's shard (host, fp32; begin and
/// numel multiples of 64), into `group_max` (map.groups floats): the largest block absmax of
/// each NF4 group among this rank's blocks (max into what is there).
void partial_group_max(const QuantMap& map, const float* shard, std::int64_t begin, std::int64_t numel,
                       std::vector<float>& group_max);

/// The shard's payload (payload_bytes(quant, numel) bytes, host): nf4 with the world's
/// group maxima (`group_max`), or int8. Blocks outside every run are zero bytes.
void encode_shard(BaseQuant quant, const QuantMap& map, const float* shard, std::int64_t begin, std::int64_t numel,
                  const std::vector<float>& group_max, std::uint8_t* payload);

/// The values a whole global tensor (row-major, `v.size()` elements) takes in a model whose
/// base is stored in `quant`: quantized and dequantized by the codec (formats::nf4 or
/// formats::int8_blocks), the tail padded with zeros to a block -- what every mesh's
/// dequantization gives for it. A 1-D tensor, and a tensor of the outer unit when
/// `quant_embeddings` is false, is returned unchanged (it stays in T), and so is every
/// tensor of a gguf base (its values are the file's dequantization, which `v` holds).
/// For `meshtrain convert --merge_lora` of a QLoRA checkpoint: the merge into the
/// dequantized base. Also right for a prefix of whole rows of a tensor whose remaining
/// rows are zeros (the padded vocabulary rows an export leaves out).
void dequantized_tensor(BaseQuant quant, bool quant_embeddings, const model::ParamSpec& p, std::vector<float>& v);

}  // namespace meshtrain::parallel
