#pragma once
// A GGUF file (llama.cpp) -> the model's parameters: the model description from the
// llama.* metadata, tensor names mapped to Hugging Face names, tensors dequantised
// (gguf_dequant) and the q/k rows put back into Hugging Face's order.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "import.hpp"
#include "formats/gguf_file.hpp"

namespace meshtrain::checkpoint {

/// model.* keys from a GGUF file's metadata (general.architecture must be llama):
/// family, vocab_size (rows of token_embd), d_model, n_layers, n_heads, n_kv_heads,
/// ffn_dim, tie_embeddings (no output.weight), norm_eps, rope_theta. UserError for other
/// architectures, rope scaling, or a head size other than d_model / n_heads.
std::vector<std::pair<std::string, std::string>> gguf_model_keys(const std::string& path);

/// The GGUF tensor name of a Llama parameter ("model.layers.3.self_attn.q_proj.weight" ->
/// "blk.3.attn_q.weight"); "" for names without one (LoRA adapters).
std::string gguf_tensor_name(const std::string& hf_name);

/// The row of a GGUF q or k projection that holds row `hf_row` of the Hugging Face tensor.
/// llama.cpp's converter reorders each head's rows from rotate-half RoPE order
/// (first half, second half) to interleaved pairs: gguf row 2i + j of a head = HF row
/// j * head_dim/2 + i.
std::int64_t gguf_qk_row(std::int64_t hf_row, int head_dim);

class GgufWeights : public ImportedWeights {
 public:
  /// Opens and validates `path` and matches every parameter of `specs` (a Llama model) by
  /// name, shape and a dequantisable type. UserError: a missing parameter, a wrong shape,
  /// an unsupported tensor type, a tensor that is not a parameter.
  GgufWeights(const std::string& path, const std::vector<model::ParamSpec>& specs, const model::ModelDims& dims);

  void read(const Piece& piece, float* dst) const override;
  bool has(int spec) const override { return sources_[spec].info != nullptr; }
  std::string file_tensor_name(int spec) const override {
    return sources_[spec].info ? sources_[spec].info->name : specs_[spec].name;
  }
  std::uint64_t bytes() const override { return bytes_; }

  // The file's own bytes (model.base_quant=gguf keeps them instead of values):
  /// The ggml type of spec's tensor (a spec the file has).
  formats::GgmlType type(int spec) const { return sources_[spec].info->type; }
  /// Rows the file holds for spec's tensor (a 1-D tensor: 1).
  std::int64_t rows(int spec) const { return sources_[spec].one_d ? 1 : sources_[spec].rows; }
  /// The bytes of row `row` (< rows(spec)) of spec's 2-D tensor in Hugging Face order (a q/k
  /// projection's rows permuted back), row_bytes(spec) of them, inside the mapping.
  const std::byte* row_data(int spec, std::int64_t row) const;
  std::uint64_t row_bytes(int spec) const { return sources_[spec].row_bytes; }

 private:
  struct Source {
    const formats::GgufTensorInfo* info = nullptr;
    std::int64_t rows = 0;       ///< rows present in the file
    const std::byte* data = nullptr;  ///< the tensor inside the mapping
    std::uint64_t row_bytes = 0;
    bool one_d = false;          ///< a 1-D parameter (norm weight)
    int qk_head_dim = 0;         ///< > 0: a q/k projection whose rows are permuted
  };
  std::unique_ptr<formats::GgufFile> file_;
  const std::vector<model::ParamSpec>& specs_;
  std::vector<Source> sources_;  ///< per spec
  std::uint64_t bytes_ = 0;
};

}  // namespace meshtrain::checkpoint
