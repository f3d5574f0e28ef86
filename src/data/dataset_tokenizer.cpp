// Does a dataset's tokenizer (meta.json) match the one a model source brings?
#include <filesystem>

#include "meshtrain/checkpoint/gguf_file.hpp"
#include "meshtrain/data/dataset.hpp"
#include "meshtrain/data/tokenizer.hpp"

namespace meshtrain::data {

void check_dataset_tokenizer(const DatasetMeta& meta, const std::string& dataset_dir, const std::string& model_source) {
  namespace fs = std::filesystem;
  if (meta.tokenizer == "random" || meta.tokenizer_kind.empty() || model_source.empty()) return;
  std::error_code ec;
  const fs::path src(model_source);
  bool has_tokenizer = false;
  if (fs::is_directory(src, ec)) {
    has_tokenizer = fs::exists(src / "tokenizer.json", ec) || fs::exists(src / "tokenizer.model", ec);
  } else if (fs::is_regular_file(src, ec) && checkpoint::looks_like_gguf(model_source)) {
    const checkpoint::GgufFile g(model_source);
    has_tokenizer = g.has_metadata("tokenizer.ggml.model");
  }
  if (!has_tokenizer) return;
  const TokenizerIdentity model = identity_of(*make_tokenizer(model_source));
  const TokenizerIdentity data{meta.tokenizer_kind, meta.vocab_size, meta.tokenizer_hash};
  check_tokenizer_match(data, model, "dataset " + dataset_dir, "model " + model_source);
}

}  // namespace meshtrain::data
