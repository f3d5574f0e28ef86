#pragma once
/// \file
/// \brief `prepare`: text files -> a dataset directory (train.bin, val.bin, meta.json).
/// Every file is one document, tokenized and followed by the end-of-text id (and preceded by
/// BOS when the tokenizer's model expects one, e.g. Llama 2's SentencePiece). The
/// validation split is the tail of each document (see `val_split_point`), so validation
/// text never appears in train and every document contributes to both splits.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.hpp"

namespace meshtrain::data {

/// \brief `prepare --pack[=true|false|auto]`. Auto (the default): alpaca and chat examples are
/// packed whenever packing puts more than one into some row (fewer rows than examples: the
/// padding it removes is compute training no longer spends), else each stays
/// alone in its row; text stays a token stream. On: always (text too, with --seq_len). Off:
/// one example per padded row.
enum class PackMode { Auto, On, Off };

struct PrepareOptions {
  std::vector<std::string> inputs;  ///< files and/or directories
  std::string output;               ///< dataset directory (created if missing)
  std::string tokenizer = "byte";   ///< make_tokenizer spec: byte, tokenizer.json, HF dir, *.model, .gguf
  double val_fraction = 0.05;       ///< in [0, 1); about this fraction of each document goes to val
  // Instruction and chat data (doc/data.md, "Instruction and chat data").
  std::string format = "text";      ///< "text" (documents), "alpaca" or "chat" (JSONL examples)
  int seq_len = 0;                  ///< alpaca/chat, text --pack: rows are seq_len + 1 tokens (required, >= 1)
  std::string chat_template = "auto";  ///< alpaca/chat: "auto" (the tokenizer's own) or a known name
  std::string system;               ///< alpaca/chat: system message for examples that have none
  PackMode pack = PackMode::Auto;   ///< several examples (documents for text) a row (doc/data.md, "Packed rows"), train.docs beside
  /// Opens `tokenizer`: make_tokenizer when unset. The CLI gives checkpoint::open_tokenizer,
  /// so that a run or checkpoint names the tokenizer it records (`prepare --tokenizer RUN`).
  std::function<std::unique_ptr<Tokenizer>(const std::string&)> open_tokenizer;
};

/// \brief What prepare did (printed by `meshtrain prepare`, stored in meta.json).
struct PrepareSummary {
  std::vector<std::string> files;         ///< documents used, in order
  std::vector<std::string> skipped;       ///< "path: reason" for files left out
  std::uint64_t bytes = 0;                ///< bytes of text in `files`
  std::uint64_t train_tokens = 0;         ///< including one eot per train piece
  std::uint64_t val_tokens = 0;
  std::int64_t vocab_size = 0;
  std::int32_t eot_id = 0;
  std::int32_t bos_id = -1, eos_id = -1, pad_id = -1;
  bool add_bos = false;
  std::string tokenizer;                  ///< the spec ("byte" or an absolute path)
  std::string tokenizer_kind;
  std::string tokenizer_hash;
  double train_entropy_bits = 0;          ///< unigram entropy of train.bin, bits/token
  double train_entropy_nats = 0;          ///< the same in nats/token (compare with a loss)
  std::string output;
  // alpaca/chat only (row_tokens > 0).
  std::string format = "text";
  std::uint32_t row_tokens = 0;           ///< seq_len + 1
  std::string chat_template;              ///< the template's name
  std::string chat_system;                ///< the system message of examples without one ("" for none)
  std::uint64_t train_examples = 0, val_examples = 0, truncated_examples = 0, dropped_examples = 0;
  std::uint64_t trainable_tokens = 0;     ///< mask = 1 tokens in train.mask
  double fill_fraction = 0;               ///< example tokens / row tokens over both splits
  // Packing (alpaca/chat, text --pack).
  bool packed = false;
  bool pack_auto = false;                 ///< no --pack given: packed (or not) by the default's rule
  std::string pack_rule;                  ///< packed: how the rows were packed ("train: .., val: .." if they differ)
  std::uint64_t train_rows = 0, val_rows = 0;  ///< rows written (without --pack: = examples)
  double fill_fraction_unpacked = 0;      ///< the fill fraction of one example per row
};

/// \brief Runs prepare on this process (the CLI calls it on rank 0 only). Writes every
/// output to `*.tmp` and renames them into place only when all are complete (meta.json
/// last, so it marks a finished dataset); on any error the temporaries are removed.
/// UserError: no input files, nothing usable in them, val_fraction outside [0, 1),
/// unknown tokenizer, output not writable; for alpaca/chat also a malformed JSONL line
/// (named file:line), a missing or zero seq_len, an unknown chat template.
/// With format alpaca or chat, every JSONL record is one example (see prepare_examples.cpp):
/// train.bin/val.bin hold one row of seq_len + 1 tokens per example and train.mask/val.mask
/// one loss-mask byte per token.
PrepareSummary prepare(const PrepareOptions& options);

/// \brief Where a document of `text` is cut: text[0, cut) goes to train and
/// text[cut, end) to val. The nominal cut is floor(size * (1 - val_fraction)); it moves to
/// the nearest line start strictly inside the document (ties: the later one), so both
/// pieces are whole lines. A document with no inner line start is cut at the nominal
/// point, moved forward to a UTF-8 character boundary. Returns size when val_fraction == 0.
std::size_t val_split_point(const std::string& text, double val_fraction);

/// \brief Whether example `index` (0-based, over all records in input order) goes to val:
/// floor((index + 1) * f) > floor(index * f), i.e. every (1/f)-th example, exactly
/// floor(n * f) of the first n.
bool example_in_val(std::uint64_t index, double val_fraction);

/// Entropy of the distribution counts / sum(counts), in bits (0 for no counts).
double unigram_entropy_bits(const std::vector<std::uint64_t>& counts);

/// The human-readable summary that `meshtrain prepare` prints.
std::string format_summary(const PrepareSummary& s);

}  // namespace meshtrain::data
