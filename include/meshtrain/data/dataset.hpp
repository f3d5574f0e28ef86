#pragma once
/// \file
/// \brief A prepared dataset directory (train.bin, val.bin, meta.json from `meshtrain
/// prepare`), or synthetic random tokens for benchmarks (`data.dir = random`).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/data_source.hpp"
#include "data/doc_file.hpp"
#include "data/loss_mask.hpp"
#include "data/token_source.hpp"

namespace meshtrain::data {

/// meta.json's "row_layout" of a preference dataset (data_format "preference").
inline constexpr const char kPreferenceRowLayout[] =
    "pairs: row 2i is the chosen response of pair i, row 2i + 1 its rejected one";

/// \brief The contents of meta.json.
struct DatasetMeta {
  std::string tokenizer;             ///< the tokenizer spec ("byte", an absolute path), or "random"
  std::string tokenizer_kind;        ///< "byte", "bpe", "sentencepiece"; "" in datasets older than it
  std::string tokenizer_hash;        ///< Tokenizer::hash(); "" for byte and older datasets
  std::int64_t vocab_size = 0;
  std::int32_t eot_id = -1;          ///< -1: none (random tokens)
  std::int32_t bos_id = -1, eos_id = -1, pad_id = -1;  ///< the tokenizer's special ids (-1: none)
  bool add_bos = false;              ///< every document piece starts with bos_id
  std::uint64_t train_tokens = 0;
  std::uint64_t val_tokens = 0;
  double val_fraction = 0;
  std::string val_split;             ///< the split rule, in words
  std::uint64_t bytes = 0;           ///< bytes of source text
  std::vector<std::string> source_files;
  double train_entropy_bits = 0;     ///< unigram entropy of train.bin (bits/token)
  std::string meshtrain_version;
  // Instruction and chat data (`prepare --format alpaca|chat`); absent for text datasets.
  std::string data_format = "text";  ///< "text", "alpaca", "chat" or "preference" (pairs of rows)
  std::uint32_t row_tokens = 0;      ///< 0: a token stream; else every example is one row of seq_len + 1 tokens
  std::string chat_template;         ///< the template the examples were rendered with ("chatml", ...)
  /// The system message the examples without one were rendered with (prepare's --system, else
  /// the default system turn of the tokenizer's template, as SmolLM2's; "" for none), which
  /// `generate --chat` and an export's chat_template then default to. Absent (nullopt) in
  /// text datasets and in datasets prepared before it was recorded.
  std::optional<std::string> chat_system;
  std::uint64_t train_examples = 0, val_examples = 0;  ///< examples (preference: pairs) in train.bin / val.bin
  std::uint64_t truncated_examples = 0;  ///< examples longer than a row, cut to it
  std::uint64_t dropped_examples = 0;    ///< examples with no trainable token left in their row
  double fill_fraction = 0;              ///< example tokens / row tokens (the rest is padding)
  // Packed rows (`prepare --pack`): several examples a row, train.docs/val.docs beside.
  bool packed = false;
  std::uint64_t train_rows = 0, val_rows = 0;  ///< rows in train.bin / val.bin (packed and preference only)
  double fill_fraction_unpacked = 0;         ///< the fill fraction the same examples had one per row
};

/// meta.json text (an object with one key per field, 2-space indented).
std::string meta_to_json(const DatasetMeta& meta);
/// Parses meta.json; UserError naming `path` for malformed JSON or missing keys.
DatasetMeta meta_from_json(const std::string& text, const std::string& path);

/// \brief Train and validation token sources and their description.
struct Dataset {
  std::shared_ptr<const TokenSource> train;
  std::shared_ptr<const TokenSource> val;  ///< may hold 0 tokens (val_fraction = 0)
  /// Instruction/chat datasets (meta.row_tokens > 0): train.mask / val.mask, the loss mask
  /// and row layout the samplers take; null for text datasets (every token counts).
  std::shared_ptr<const MaskFile> train_mask, val_mask;
  /// Packed datasets (meta.packed): train.docs / val.docs, the documents of each row; null
  /// otherwise.
  std::shared_ptr<const DocFile> train_docs, val_docs;
  DatasetMeta meta;
  std::string dir;

  /// Opens `dir`: meta.json, train.bin and val.bin must exist and agree (vocabulary, token
  /// counts). UserError naming the missing or inconsistent file and saying to run
  /// `meshtrain prepare`.
  static Dataset open(const std::string& dir);
  /// Synthetic tokens: train = RandomTokens(vocab, seed), val = RandomTokens(vocab, seed + 1).
  static Dataset random(std::int64_t vocab, std::uint64_t seed);
  /// What a trainer calls with `data.dir`: random -> random(model_vocab, seed), a directory
  /// -> open(dir) and check_vocab(meta.vocab_size, model_vocab), and an empty directory is a
  /// UserError asking for data.dir.
  static Dataset load(const DataSource& source, std::int64_t model_vocab, std::uint64_t seed);
};

/// UserError "the dataset's vocabulary (N) is larger than model.vocab_size (M)" when
/// dataset_vocab > model_vocab (a model may have more ids than the data uses, not fewer).
void check_vocab(std::int64_t dataset_vocab, std::int64_t model_vocab);

}  // namespace meshtrain::data
