#pragma once
/// \brief The tokenizer of a checkpoint's model. A model is only meaningful with the
/// tokenizer it was trained with, so every checkpoint records it (attributes of /model,
/// doc/checkpoints.md) and eval, generate, prepare and convert take it from there instead
/// of falling back to bytes. A tokenizer given explicitly must be the same one.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "data/dataset.hpp"
#include "data/tokenizer.hpp"

namespace meshtrain::checkpoint {

/// The record of `tok` (its make_tokenizer spec and identity).
TokenizerRef tokenizer_ref_of(const data::Tokenizer& tok);

/// The tokenizer a dataset's meta.json records; unknown for random tokens.
TokenizerRef tokenizer_ref_of(const data::DatasetMeta& meta);

/// The tokenizer checkpoint file `path` records (serial). `recorded` false for a file
/// written before tokenizers were recorded. UserError when the file cannot be opened.
TokenizerRef stored_tokenizer(const std::string& path);

/// The tokenizer a model source brings: a meshtrain checkpoint's record (a checkpoint
/// directory: its newest checkpoint's, as the weights loader picks it), a GGUF file's
/// tokenizer.ggml.* metadata, a Hugging Face directory's tokenizer.json / tokenizer.model,
/// also for a .safetensors file inside that directory (the spec is the absolute path of the
/// file or directory). Unknown for other sources
/// (safetensors without tokenizer files, random data). Serial; UserError for a source whose
/// tokenizer cannot be read.
TokenizerRef source_tokenizer(const std::string& path);
/// The same, read on rank 0 of `world` and shared (collective; errors on every rank alike).
TokenizerRef source_tokenizer(const MpiComm& world, const std::string& path);

/// The tokenizer a run's checkpoints record: the one of checkpoint.init_from when it brings
/// one (the model's), else the dataset's. UserError naming both when they differ (a dataset
/// prepared with another tokenizer than the model's).
TokenizerRef run_tokenizer(const data::DatasetMeta& meta, const std::string& dataset_name,
                           const TokenizerRef& init_from, const std::string& init_from_name);

/// UserError naming both sides when `given` is not the tokenizer `model` records (another
/// kind, vocabulary size or hash). Nothing is checked when `model` is unknown.
void require_same_tokenizer(const TokenizerRef& given, const std::string& given_name, const TokenizerRef& model,
                            const std::string& model_name);

/// The tokenizer `model` records, made again from its spec and checked to be the same
/// (UserError naming the record when the file is gone or changed). `model` must be known.
std::unique_ptr<data::Tokenizer> open_recorded_tokenizer(const TokenizerRef& model, const std::string& model_name);

/// data::make_tokenizer, and also the tokenizer a meshtrain checkpoint, checkpoint directory
/// or run output.dir records (tokenizer_of_checkpoint): every command's --tokenizer.
std::unique_ptr<data::Tokenizer> open_tokenizer(const std::string& spec);

/// \brief Refuses a dataset prepared with another tokenizer than the model's. `model_source`
/// is where the model's weights come from (checkpoint.init_from, eval/generate --checkpoint);
/// when it is a .gguf file, a Hugging Face directory with tokenizer files or a meshtrain
/// checkpoint that records its tokenizer, its tokenizer is
/// compared with the one meta.json records (kind, vocabulary size, hash; see
/// check_tokenizer_match). Nothing is checked for random data, other sources or when either
/// side records no tokenizer. UserError naming both sides otherwise.
void check_dataset_tokenizer(const data::DatasetMeta& meta, const std::string& dataset_dir, const std::string& model_source);

/// For open_tokenizer: when `spec` is a meshtrain checkpoint, a checkpoint directory or a
/// run's output.dir (its checkpoints/), the tokenizer its newest checkpoint records (so
/// `prepare --tokenizer RUN` makes data for an existing run); null for anything else.
/// UserError when the checkpoint records no tokenizer or it cannot be read.
std::unique_ptr<data::Tokenizer> tokenizer_of_checkpoint(const std::string& spec);

/// The token ids a Hugging Face config.json and generation_config.json name (-1: none):
/// the tokenizer's BOS, EOS and padding, and the single token ending an assistant turn in
/// the chat format the model was trained in (<|im_end|>, <|eot_id|>; Alpaca's: the end-of-text
/// token prepare appends to each response; -1 when the tokenizer spells it with several tokens).
struct HfTokenIds {
  std::int64_t bos = -1, eos = -1, pad = -1, end_of_turn = -1;
};

/// The Hugging Face tokenizer files of `ref` for a model export: copies of tokenizer.json,
/// tokenizer_config.json, special_tokens_map.json, tokenizer.model where the source is such
/// a file or directory; for a GGUF byte-level BPE tokenizer a tokenizer.json and
/// tokenizer_config.json written from its metadata, for a GGUF SentencePiece tokenizer a
/// tokenizer.model and a LlamaTokenizer tokenizer_config.json. Empty (with `note` saying
/// why) for the byte tokenizer and an unknown one. When `ref` records a chat format other
/// than the one the tokenizer's own template is (or it has none), tokenizer_config.json's
/// chat_template is that format's Jinja (data::chat_template_jinja) and `chat_note` says
/// which replaced which. `ids` (optional) receives the ids config.json should name (also for
/// the byte tokenizer, which has no files).
/// UserError when the recorded tokenizer is gone or changed.
std::vector<std::pair<std::string, std::string>> hf_tokenizer_files(const TokenizerRef& ref, const std::string& model_name,
                                                                    std::string* note, HfTokenIds* ids = nullptr,
                                                                    std::string* chat_note = nullptr);

}  // namespace meshtrain::checkpoint
