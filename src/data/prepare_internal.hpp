#pragma once
// What prepare.cpp and prepare_examples.cpp share. Private to src/data.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/chat_template.hpp"
#include "data/dataset.hpp"
#include "data/prepare.hpp"
#include "data/tokenizer.hpp"
#include "packing.hpp"

namespace meshtrain::data {

/// meta.json's fields from a completed summary (the row fields when s.row_tokens > 0).
DatasetMeta meta_of_summary(const PrepareSummary& s, double val_fraction, const std::string& val_split);

/// Writes meta.json text to `path` (a staged *.tmp), flushed and fsynced.
void write_meta_file(const std::string& path, const DatasetMeta& meta);

/// The `token` of require_special_token that names the BOS (its message differs).
inline constexpr const char kBosToken[] = "BOS token";

/// UserError when `id` (the tokenizer's `token`: kBosToken, "end-of-text token") is -1,
/// naming the tokenizer, the token, where it could have come from, and `need`: what of the
/// chosen format writes it.
void require_special_token(const Tokenizer& tok, std::int32_t id, const char* token, const std::string& need);

/// The id that pads a row after its last example: the tokenizer's pad id, else end-of-text
/// (never trained on).
std::int32_t row_pad_id(const Tokenizer& tok);

/// UserError unless rows of R = seq_len + 1 tokens can be packed: segment ids are u16.
void require_packable_rows(std::uint32_t R, int seq_len);

/// The unigram entropy of the trainable train tokens (`counts`, one per id) into `s`.
void set_train_entropy(PrepareSummary& s, const std::vector<std::uint64_t>& counts);

/// The end of a row dataset (alpaca/chat examples, or packed text): with `packed`, writes
/// each split's kept examples as packed rows (padded with `pad`); closes every file of both
/// splits; fills the summary's token, example, row, trainable, fill and entropy fields.
void finish_row_splits(RowWriter& train, RowWriter& val, std::uint32_t R, std::int32_t pad, bool packed,
                       const std::vector<std::uint64_t>& counts, PrepareSummary& s);

/// prepare --format alpaca|chat: `files` are the JSONL inputs (sorted), `s` holds the
/// tokenizer fields already; returns the completed summary after committing the dataset.
PrepareSummary prepare_examples(const PrepareOptions& o, const Tokenizer& tok, const std::vector<std::string>& files,
                                PrepareSummary s);

/// The JSONL records of `files` in order: `record(path, line_no, line)` for every non-blank
/// line (1-based line numbers, for messages); each file's path and size are added to
/// s.files / s.bytes once its records are done.
void for_each_jsonl_record(const std::vector<std::string>& files, PrepareSummary& s,
                           const std::function<void(const std::string&, std::size_t, const std::string&)>& record);

/// The name of a chat template ("chatml", ...), as meta.json records it.
std::string template_name(ChatTemplateKind k);

/// --chat_template: "auto" is the template that comes with the tokenizer, recognised; else by name.
ChatFormat resolve_chat_format(const std::string& name, const Tokenizer& tok);

/// prepare --format preference (prepare_preference.cpp): each record's chosen and rejected
/// renderings as adjacent rows (doc/data.md, "Preference data"); returns the completed summary.
PrepareSummary prepare_preference(const PrepareOptions& o, const Tokenizer& tok, const std::vector<std::string>& files,
                                  PrepareSummary s);

/// The part of the printed summary specific to alpaca/chat datasets.
std::string format_examples_summary(const PrepareSummary& s);

}  // namespace meshtrain::data
