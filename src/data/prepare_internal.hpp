#pragma once
// What prepare.cpp and prepare_examples.cpp share. Private to src/data.

#include <memory>
#include <string>
#include <vector>

#include "meshtrain/data/dataset.hpp"
#include "meshtrain/data/prepare.hpp"
#include "meshtrain/data/tokenizer.hpp"

namespace meshtrain::data {

/// Writes meta.json text to `path` (a staged *.tmp), flushed and fsynced.
void write_meta_file(const std::string& path, const DatasetMeta& meta);

/// prepare --format alpaca|chat: `files` are the JSONL inputs (sorted), `s` holds the
/// tokenizer fields already; returns the completed summary after committing the dataset.
PrepareSummary prepare_examples(const PrepareOptions& o, const Tokenizer& tok, const std::vector<std::string>& files,
                                PrepareSummary s);

/// The part of the printed summary specific to alpaca/chat datasets.
std::string format_examples_summary(const PrepareSummary& s);

}  // namespace meshtrain::data
