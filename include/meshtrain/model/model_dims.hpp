#pragma once
/// \brief Resolved model dimensions (defaults applied, vocab padded) and the tensor-parallel
/// slice of them that one rank computes.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/choices.hpp"

namespace meshtrain::model {

/// The model families (model.family); the enum the config parses.
using Family = ModelFamily;

/// model.base_quant=gguf: how the GGUF base file stores one frozen matrix, which its FSDP
/// shards then keep (checkpoint::gguf_base_formats reads them from the file's tensor infos).
struct BaseTensorFormat {
  std::uint32_t ggml_type = 0;  ///< formats::GgmlType (the file's number): the block type kept
  std::int64_t rows = 0;        ///< rows the file holds; the model's further rows (vocabulary padding) are zeros
};
/// BaseTensorFormat of every frozen matrix, by Hugging Face name.
using BaseFormats = std::map<std::string, BaseTensorFormat>;

struct ModelDims {
  Family family = Family::Gpt2;
  std::int64_t vocab = 0;        ///< padded vocabulary (rows of the embedding)
  std::int64_t valid_vocab = 0;  ///< model.vocab_size: ids >= this are padding (masked logits)
  int d_model = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int max_seq_len = 0;
  bool tied = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000;
  double init_std = 0.02;
  int lora_rank = 0;                     ///< >0: LoRA fine-tuning (base weights frozen)
  double lora_alpha = 16;
  std::vector<std::string> lora_targets; ///< projections with adapters (family names, see lora_target_names)
  std::vector<int> lora_target_ids;      ///< the same, as indices into lora_target_names(family)
  double lora_scale() const { return lora_rank > 0 ? lora_alpha / lora_rank : 0.0; }
  /// How the frozen base of a LoRA run is stored (QLoRA: nf4, int8; gguf); None without LoRA.
  BaseQuant base_quant = BaseQuant::None;
  /// With base_quant: the embeddings and the LM head (the outer unit) quantized too; false
  /// keeps them in the compute dtype. Always true when base_quant is None.
  bool base_quant_embeddings = true;
  /// base_quant=gguf: the block type of each frozen matrix (filled by the app from the base file).
  BaseFormats base_formats;

  /// Parameters of the logical model (excluding padding of the vocab? no: including it).
  std::int64_t num_params() const;
  /// Forward FLOPs per token of the matmuls (2 * params in matmuls) plus attention
  /// (2 * 2 * n_layers * seq_len * d_model for scores and weighted sum, causal not discounted).
  double flops_per_token_forward(int seq_len) const;
};

/// \brief The model.* settings as given, before defaults: the app layer fills it from the
/// configuration (model.lora_targets already a list, `auto` replaced by lora_auto_targets).
struct ModelSettings {
  Family family = Family::Gpt2;
  std::int64_t vocab_size = 50257;
  int vocab_pad_multiple = 1;
  int d_model = 768, n_layers = 12, n_heads = 12;
  int n_kv_heads = -1;                   ///< -1: = n_heads
  int ffn_dim = -1;                      ///< -1: 4*d_model (gpt2) or the Llama rule
  int max_seq_len = 1024;
  bool tie_embeddings = true;
  double norm_eps = 1e-5, rope_theta = 10000.0, init_std = 0.02;
  int lora_rank = 0;
  double lora_alpha = 16.0;
  std::vector<std::string> lora_targets; ///< projection names as given (blank entries dropped)
  BaseQuant base_quant = BaseQuant::None;
  bool base_quant_embeddings = true;
};

/// \brief Applies defaults and checks consistency (UserError naming the key).
ModelDims resolve_dims(const ModelSettings& settings);

/// \brief What one tensor-parallel rank holds and computes.
struct TpDims {
  int tp = 1, rank = 0;
  int heads = 0;            ///< local query heads
  int kv_heads = 0;         ///< kv heads present locally (all of them when replicated)
  bool kv_replicated = false;
  int q_head_offset = 0;    ///< global index of local query head 0
  int kv_head_offset = 0;   ///< global index of local kv head 0
  int ffn = 0;              ///< local MLP width
  std::int64_t vocab = 0;   ///< local vocab rows
  std::int64_t vocab_start = 0;
};

/// \brief The TP slice for `rank` of `tp`; UserError for impossible layouts (heads or
/// vocab not divisible, with the fix).
TpDims tp_dims(const ModelDims& dims, int tp, int rank);

Family parse_family(const std::string& name);
/// Projections that can carry LoRA adapters: llama q,k,v,o,gate,up,down; gpt2 c_attn,
/// attn.c_proj, c_fc, mlp.c_proj.
std::vector<std::string> lora_target_names(Family f);
/// The role (parameter name within a block, without ".weight") of lora_target_names(f)[target]:
/// gpt2 attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj; llama self_attn.{q,k,v,o}_proj,
/// mlp.{gate,up,down}_proj.
const char* lora_target_role(Family f, int target);
/// What model.lora_targets=auto (the default) means: PEFT's default for the family, the
/// attention projections "q,v" (llama) or the fused "c_attn" (gpt2).
std::string lora_auto_targets(Family f);
const char* family_name(Family f);

}  // namespace meshtrain::model
