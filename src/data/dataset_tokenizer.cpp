// Does a dataset's tokenizer (meta.json) match the one a model source brings?
#include "meshtrain/checkpoint/tokenizer_ref.hpp"
#include "meshtrain/data/dataset.hpp"
#include "meshtrain/data/tokenizer.hpp"

namespace meshtrain::data {

void check_dataset_tokenizer(const DatasetMeta& meta, const std::string& dataset_dir, const std::string& model_source) {
  if (meta.tokenizer == "random" || meta.tokenizer_kind.empty() || model_source.empty()) return;
  // A GGUF's or Hugging Face directory's tokenizer, or the one a meshtrain checkpoint records.
  const checkpoint::TokenizerRef model = checkpoint::source_tokenizer(model_source);
  if (!model.known()) return;
  const TokenizerIdentity data{meta.tokenizer_kind, meta.vocab_size, meta.tokenizer_hash};
  check_tokenizer_match(data, {model.kind, model.vocab_size, model.hash}, "dataset " + dataset_dir,
                        "model " + model_source);
}

}  // namespace meshtrain::data
