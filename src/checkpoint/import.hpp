#pragma once
// Safetensors -> the model's parameters: opening a file or a (sharded) directory, matching
// tensor names and shapes to the parameter registry, reading one rank's pieces.

#include <memory>
#include <string>
#include <vector>

#include "formats/safetensors.hpp"
#include "model/param_spec.hpp"
#include "pieces.hpp"

namespace meshtrain::checkpoint {

/// \brief Pretrained weights matched to the parameter registry (safetensors or GGUF): each
/// rank reads the pieces of its state range.
class ImportedWeights {
 public:
  virtual ~ImportedWeights() = default;
  /// Values of `piece` (of parameter piece.spec) in piece order into `dst`.
  virtual void read(const Piece& piece, float* dst) const = 0;
  /// False for a parameter the source does not hold (a LoRA adapter: it keeps its initial value).
  virtual bool has(int spec) const = 0;
  /// The tensor's name as the source spells it (and its file when there are several
  /// shards), for messages naming a bad value.
  virtual std::string file_tensor_name(int spec) const = 0;
  /// Checks that need the whole source once (rank 0): UserError when they fail.
  virtual void check_once() const {}
  /// Bytes of source data matched to parameters.
  virtual std::uint64_t bytes() const = 0;
};

class SafetensorsWeights : public ImportedWeights {
 public:
  /// Opens `path` (a .safetensors file, or a directory with model.safetensors or
  /// model.safetensors.index.json), validates every file and matches every parameter of
  /// `specs`. Accepted spellings: the HF name; for GPT-2 also without "transformer."
  /// Ignored: HF's attention-mask buffers (.attn.bias, .attn.masked_bias), rotary
  /// inv_freq buffers, and lm_head.weight of a tied model. Embedding / LM-head tensors may
  /// hold dims.valid_vocab rows instead of the padded vocab (padding rows become 0).
  /// UserError: a missing parameter, a wrong shape, a non-float dtype, an unexpected tensor.
  SafetensorsWeights(const std::string& path, const std::vector<model::ParamSpec>& specs,
                     const model::ModelDims& dims);
  ~SafetensorsWeights() override;

  void read(const Piece& piece, float* dst) const override;
  bool has(int spec) const override { return sources_[spec].tensor != nullptr; }
  std::string file_tensor_name(int spec) const override;
  /// For a tied model whose file also holds lm_head.weight: UserError unless it equals the
  /// embedding (it would otherwise be silently dropped).
  void check_once() const override;
  std::uint64_t bytes() const override { return bytes_; }

 private:
  struct Source {
    const formats::SafetensorsFile* file = nullptr;
    const formats::SafetensorsTensor* tensor = nullptr;
    std::int64_t rows = 0;  ///< rows present in the file (<= the parameter's rows)
  };
  const std::vector<model::ParamSpec>& specs_;
  std::vector<std::unique_ptr<formats::SafetensorsFile>> files_;
  std::vector<Source> sources_;  ///< per spec
  Source tied_head_;             ///< lm_head.weight of a tied model, when present
  int embedding_spec_ = -1;
  bool gpt2_ = false;            ///< gpt2 always ties: an untied head cannot be loaded at all
  std::uint64_t bytes_ = 0;
};

}  // namespace meshtrain::checkpoint
