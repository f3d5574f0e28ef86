#pragma once
/// \brief `meshtrain convert`: an HDF5 checkpoint written out as a Hugging Face model
/// directory (the safetensors file format itself: formats/safetensors.hpp).

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::checkpoint {

struct ExportOptions {
  std::string dtype = "fp32";                      ///< fp32 | bf16
  std::uint64_t max_shard_bytes = 2ull << 30;      ///< shard above this many tensor bytes
  bool merge_lora = false;                         ///< LoRA checkpoint: merge adapters into the base weights
  std::string base_model;                          ///< PEFT base_model_name_or_path ("": the run's init_from)
};

struct ExportSummary {
  std::vector<std::string> files;                  ///< written, in out_dir
  std::uint64_t tensor_bytes = 0;
  int tensors = 0;
  int step = 0;
  std::string kind;                                ///< model | peft_adapter | merged_lora
  std::string base_model;                          ///< peft_adapter: the base model it refers to ("" unknown)
  std::string tokenizer_note;                      ///< why no tokenizer files were written ("" when they were)
  /// The chat template written is the training data's format, not the tokenizer's own
  /// (which one replaced which); "" when the tokenizer's template was kept.
  std::string chat_note;
};

/// \brief Converts HDF5 checkpoint `h5_path` into a Hugging Face model directory:
/// model.safetensors (or model-0000i-of-0000N.safetensors + model.safetensors.index.json
/// when the tensors exceed max_shard_bytes) and config.json in the family's HF format.
/// Embedding and LM-head rows beyond the model's vocab_size (padding) are dropped.
/// A LoRA checkpoint (model.lora_rank > 0) is written as a PEFT adapter instead:
/// adapter_model.safetensors (the adapters under PEFT's names,
/// base_model.model.<name>.lora_A/B.weight) + adapter_config.json (r, lora_alpha,
/// target_modules, base_model_name_or_path); or, with options.merge_lora, as the full model
/// with every adapted projection replaced by W + (alpha/r) B A (config.json as above).
/// Serial (one process). Files are written under temporary names and renamed at the end,
/// so a failure leaves no partial model. UserError for bad input.
ExportSummary export_safetensors(const std::string& h5_path, const std::string& out_dir,
                                 const ExportOptions& options = {});

}  // namespace meshtrain::checkpoint
