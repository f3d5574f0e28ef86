// prepare --format preference: JSONL preference records -> pairs of rows (the chosen and the
// rejected rendering of the same prompt, adjacent: row 2i and row 2i + 1) with a loss mask on
// each final response.
//
// Why adjacent padded rows: a preference objective (DPO) compares the log-probabilities of the
// two responses of one pair, so both must be in the same rank's micro-batch. With pair i in
// rows 2i and 2i + 1 a sampler that hands out windows two at a time (an even micro-batch)
// keeps every pair whole on any mesh, and the pair is found from the row index alone. Neither
// response is ever truncated: a cut response would change the log-probability the pair
// compares, so a conversation longer than a row is an error naming the --seq_len it needs.
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "data/chat_examples.hpp"
#include "data/loss_mask.hpp"
#include "data/token_file.hpp"
#include "packing.hpp"
#include "prepare_internal.hpp"
#include "staged_output.hpp"

namespace meshtrain::data {
namespace {

using ull = unsigned long long;

constexpr const char* kPairSplitRule =
    "per preference record: record i (0-based, over all records of all files in path order) goes to val when "
    "floor((i + 1) * val_fraction) > floor(i * val_fraction); its chosen and rejected rows stay together";

/// The tokens of one response's rendering; UserError when the prompt leaves no room for a
/// response in a row or the whole conversation is longer than a row.
MaskedTokens response_tokens(const Tokenizer& tok, const std::vector<ChatSegment>& segs, bool alpaca, const char* which,
                             std::uint32_t R) {
  MaskedTokens ex = tokenize_with_mask(tok, segs);
  // The Alpaca prompt format has no end-of-turn marker: end-of-text ends the response (trained
  // on, as for --format alpaca).
  if (alpaca) {
    ex.ids.push_back(tok.eot_id());
    ex.mask.push_back(1);
  }
  const auto first = static_cast<std::size_t>(std::find(ex.mask.begin(), ex.mask.end(), 1) - ex.mask.begin());
  MESHTRAIN_REQUIRE(first < R,
                    "the prompt is %zu tokens, so no token of the %s response fits in a row of %u tokens "
                    "(--seq_len %u); give a --seq_len above the longest conversation",
                    first, which, R, R - 1);
  MESHTRAIN_REQUIRE(ex.ids.size() <= R,
                    "the prompt with the %s response is %zu tokens, longer than a row of %u tokens (--seq_len %u); "
                    "give --seq_len %zu or more: preference pairs are never truncated (a cut response would change "
                    "the log-probability the pair compares)",
                    which, ex.ids.size(), R, R - 1, ex.ids.size() - 1);
  return ex;
}

}  // namespace

PrepareSummary prepare_preference(const PrepareOptions& o, const Tokenizer& tok, const std::vector<std::string>& files,
                                  PrepareSummary s) {
  MESHTRAIN_REQUIRE(o.pack != PackMode::On,
                    "--pack does not apply to --format preference: each pair is two padded rows side by side (the "
                    "chosen and the rejected response), so that a pair is never split (doc/data.md, \"Preference "
                    "data\")");
  const ChatFormat chat = resolve_chat_format(o.chat_template, tok);
  const bool alpaca = chat.kind == ChatTemplateKind::Alpaca;
  const auto R = static_cast<std::uint32_t>(o.seq_len) + 1;
  const std::int32_t pad = tok.pad_id() >= 0 ? tok.pad_id() : tok.eot_id();
  if (alpaca)
    require_special_token(tok, tok.eot_id(), "end-of-text token",
                          "the alpaca template ends every response with it (trained on, so the model learns to stop)");
  require_special_token(tok, pad, "end-of-text token (nor a padding token)",
                        "prepare --format preference pads every row after its response with the pad id, else "
                        "end-of-text");
  s.format = o.format;
  s.row_tokens = R;
  s.chat_template = template_name(chat.kind);
  s.chat_system = default_system_message(chat, o.system);
  // Before anything is staged: a marker the model cannot emit as one token is refused.
  require_end_of_turn_token(tok, chat, s.chat_template);

  StagedOutput out(o.output);
  RowWriter train(out.stage("train.bin"), out.stage("train.mask"), "", s.vocab_size, R);
  RowWriter val(out.stage("val.bin"), out.stage("val.mask"), "", s.vocab_size, R);
  const std::string meta_tmp = out.stage("meta.json");  // staged last: marks a complete dataset
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(s.vocab_size), 0);

  std::uint64_t record = 0;
  std::vector<std::int32_t> row_ids(R);
  std::vector<std::uint8_t> row_mask(R);
  for_each_jsonl_record(files, s, [&](const std::string& path, std::size_t line_no, const std::string& line) {
    MaskedTokens pair[2];
    try {
      const PreferenceSegments segs = render_preference(line, chat, o.system);
      pair[0] = response_tokens(tok, segs.chosen, alpaca, "chosen", R);
      pair[1] = response_tokens(tok, segs.rejected, alpaca, "rejected", R);
    } catch (const UserError& e) {
      throw UserError(strprintf("%s:%zu: %s", path.c_str(), line_no, e.what()));
    }
    RowWriter& w = example_in_val(record++, o.val_fraction) ? val : train;
    for (const MaskedTokens& ex : pair) {  // row 2i: chosen, row 2i + 1: rejected
      const std::size_t n = ex.ids.size();
      std::copy(ex.ids.begin(), ex.ids.end(), row_ids.begin());
      std::copy(ex.mask.begin(), ex.mask.end(), row_mask.begin());
      std::fill(row_ids.begin() + static_cast<std::ptrdiff_t>(n), row_ids.end(), pad);
      std::fill(row_mask.begin() + static_cast<std::ptrdiff_t>(n), row_mask.end(), 0);
      w.tokens.append(row_ids.data(), R);
      w.mask.append(row_mask.data(), R);
      ++w.rows;
      w.filled += n;
      for (std::uint32_t j = 1; j < R; ++j) {  // position 0 is never a target
        w.trainable += row_mask[j];
        if (&w == &train && row_mask[j]) ++counts[static_cast<std::size_t>(row_ids[j])];
      }
    }
    ++w.examples;
  });
  MESHTRAIN_REQUIRE(train.examples > 0,
                    "no training pair: %llu record(s) in %zu file(s), %llu in val; give more records or a smaller "
                    "--val_fraction",
                    static_cast<ull>(record), files.size(), static_cast<ull>(val.examples));
  for (RowWriter* w : {&train, &val}) {
    w->tokens.close();
    w->mask.close();
  }
  s.train_tokens = train.tokens.count();
  s.val_tokens = val.tokens.count();
  s.train_examples = train.examples;
  s.val_examples = val.examples;
  s.train_rows = train.rows;
  s.val_rows = val.rows;
  s.trainable_tokens = train.trainable;
  s.fill_fraction = static_cast<double>(train.filled + val.filled) / static_cast<double>((train.rows + val.rows) * R);
  s.fill_fraction_unpacked = s.fill_fraction;
  s.train_entropy_bits = unigram_entropy_bits(counts);
  s.train_entropy_nats = s.train_entropy_bits * std::log(2.0);

  write_meta_file(meta_tmp, meta_of_summary(s, o.val_fraction, kPairSplitRule));
  out.commit();
  return s;
}

}  // namespace meshtrain::data
