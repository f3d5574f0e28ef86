// prepare --format alpaca|chat: JSONL records -> one padded row per example, with a loss
// mask beside the tokens.
//
// Padding, not packing: each example is alone in its row of seq_len + 1 tokens, so
// attention (causal within a row) never crosses from one example into another without any
// change to the attention kernels; the price is the padding, reported as the fill fraction.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "meshtrain/build_config.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/data/chat_examples.hpp"
#include "meshtrain/data/chat_prompt.hpp"
#include "meshtrain/data/loss_mask.hpp"
#include "meshtrain/data/text_files.hpp"
#include "meshtrain/data/token_file.hpp"
#include "prepare_internal.hpp"
#include "staged_output.hpp"

namespace meshtrain::data {
namespace {

using ull = unsigned long long;

std::string template_name(ChatTemplateKind k) {
  switch (k) {
    case ChatTemplateKind::ChatML: return "chatml";
    case ChatTemplateKind::Llama3: return "llama3";
    case ChatTemplateKind::Llama2: return "llama2";
    case ChatTemplateKind::Alpaca: return "alpaca";
  }
  return "";
}

/// --chat_template auto: the template that comes with the tokenizer, recognised; else by name.
ChatFormat resolve_chat_format(const std::string& name, const Tokenizer& tok) {
  if (name != "auto") return chat_format_by_name(name);
  return recognise_chat_template(tok.name() == "byte" ? std::string() : chat_template_text(tok.name()),
                                 "--tokenizer " + tok.name() + " (--chat_template auto)");
}

/// One split's outputs and counts.
struct RowWriter {
  TokenFileWriter tokens;
  MaskFileWriter mask;
  std::uint64_t rows = 0, filled = 0, trainable = 0;
  RowWriter(const std::string& tok_path, const std::string& mask_path, std::int64_t vocab, std::uint32_t row)
      : tokens(tok_path, vocab), mask(mask_path, row) {}
};

constexpr const char* kExampleSplitRule =
    "per example: record i (0-based, over all records of all files in path order) goes to val when "
    "floor((i + 1) * val_fraction) > floor(i * val_fraction), i.e. every (1/val_fraction)-th record";

}  // namespace

PrepareSummary prepare_examples(const PrepareOptions& o, const Tokenizer& tok, const std::vector<std::string>& files,
                                PrepareSummary s) {
  const ExampleFormat format = o.format == "alpaca" ? ExampleFormat::Alpaca : ExampleFormat::Chat;
  const ChatFormat chat = resolve_chat_format(o.chat_template, tok);
  const auto R = static_cast<std::uint32_t>(o.seq_len) + 1;  // row: inputs + the shifted last target
  // Padding after an example: the pad id when the tokenizer has one, else end-of-text; never trained on.
  const std::int32_t pad = tok.pad_id() >= 0 ? tok.pad_id() : tok.eot_id();
  if (chat.kind == ChatTemplateKind::Alpaca)
    require_special_token(tok, tok.eot_id(), "end-of-text token",
                          "the alpaca template ends every response with it (trained on, so the model learns to stop)");
  require_special_token(tok, pad, "end-of-text token (nor a padding token)",
                        strprintf("prepare --format %s pads every row after its example with the pad id, else "
                                  "end-of-text", o.format.c_str()));
  s.format = o.format;
  s.row_tokens = R;
  s.chat_template = template_name(chat.kind);

  StagedOutput out(o.output);
  RowWriter train(out.stage("train.bin"), out.stage("train.mask"), s.vocab_size, R);
  RowWriter val(out.stage("val.bin"), out.stage("val.mask"), s.vocab_size, R);
  const std::string meta_tmp = out.stage("meta.json");  // staged last: marks a complete dataset
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(s.vocab_size), 0);

  std::uint64_t record = 0;
  std::vector<std::int32_t> row_ids(R);
  std::vector<std::uint8_t> row_mask(R);
  for (const std::string& path : files) {
    const std::string text = read_file_bytes(path);
    std::size_t begin = 0;
    for (std::size_t line_no = 1; begin < text.size(); ++line_no) {
      std::size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(begin, end - begin);
      begin = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are not records
      MaskedTokens ex;
      try {
        ex = tokenize_with_mask(tok, render_example(line, format, chat, o.system));
      } catch (const UserError& e) {
        throw UserError(strprintf("%s:%zu: %s", path.c_str(), line_no, e.what()));
      }
      // The Alpaca prompt format has no end-of-turn marker: the end-of-text id ends the
      // response and is trained on, so the model learns to stop.
      if (chat.kind == ChatTemplateKind::Alpaca) {
        ex.ids.push_back(tok.eot_id());
        ex.mask.push_back(1);
      }
      RowWriter& w = example_in_val(record++, o.val_fraction) ? val : train;
      if (ex.ids.size() > R) ++s.truncated_examples;
      const std::size_t n = std::min<std::size_t>(ex.ids.size(), R);
      std::copy_n(ex.ids.begin(), n, row_ids.begin());
      std::copy_n(ex.mask.begin(), n, row_mask.begin());
      std::fill(row_ids.begin() + static_cast<std::ptrdiff_t>(n), row_ids.end(), pad);
      std::fill(row_mask.begin() + static_cast<std::ptrdiff_t>(n), row_mask.end(), 0);
      // Position 0 is never a target; a row whose targets are all masked teaches nothing.
      std::uint64_t trainable = 0;
      for (std::uint32_t j = 1; j < R; ++j) trainable += row_mask[j];
      if (trainable == 0) {
        ++s.dropped_examples;
        continue;
      }
      w.tokens.append(row_ids.data(), R);
      w.mask.append(row_mask.data(), R);
      ++w.rows;
      w.filled += n;
      w.trainable += trainable;
      if (&w == &train)
        for (std::uint32_t j = 1; j < R; ++j)
          if (row_mask[j]) ++counts[static_cast<std::size_t>(row_ids[j])];
    }
    s.files.push_back(path);
    s.bytes += text.size();
  }
  MESHTRAIN_REQUIRE(train.rows > 0,
                    "no training example: %llu record(s) in %zu file(s), %llu without a trainable token within "
                    "--seq_len %d + 1 tokens, %llu in val; give more examples, a longer --seq_len or a smaller "
                    "--val_fraction",
                    static_cast<ull>(record), files.size(), static_cast<ull>(s.dropped_examples), o.seq_len,
                    static_cast<ull>(val.rows));
  for (RowWriter* w : {&train, &val}) {
    w->tokens.close();
    w->mask.close();
  }
  s.train_tokens = train.tokens.count();
  s.val_tokens = val.tokens.count();
  s.train_examples = train.rows;
  s.val_examples = val.rows;
  s.trainable_tokens = train.trainable;
  s.fill_fraction = static_cast<double>(train.filled + val.filled) / static_cast<double>((train.rows + val.rows) * R);
  s.train_entropy_bits = unigram_entropy_bits(counts);
  s.train_entropy_nats = s.train_entropy_bits * std::log(2.0);

  DatasetMeta meta = meta_of(s, o.val_fraction, kExampleSplitRule);
  meta.data_format = s.format;
  meta.row_tokens = R;
  meta.chat_template = s.chat_template;
  meta.train_examples = s.train_examples;
  meta.val_examples = s.val_examples;
  meta.truncated_examples = s.truncated_examples;
  meta.dropped_examples = s.dropped_examples;
  meta.fill_fraction = s.fill_fraction;
  write_meta_file(meta_tmp, meta);
  out.commit();
  return s;
}

std::string format_examples_summary(const PrepareSummary& s) {
  const std::uint64_t rows = s.train_examples + s.val_examples;
  std::string r = strprintf("  input:   %zu JSONL file(s), %llu bytes; --format %s, chat template %s\n",
                            s.files.size(), static_cast<ull>(s.bytes), s.format.c_str(), s.chat_template.c_str());
  r += strprintf("  examples: %llu = train %llu + val %llu, one padded row of %u tokens each (seq_len %u)\n",
                 static_cast<ull>(rows), static_cast<ull>(s.train_examples), static_cast<ull>(s.val_examples),
                 s.row_tokens, s.row_tokens - 1);
  r += strprintf("  truncated: %llu example(s) longer than a row, cut to %u tokens; dropped: %llu with no "
                 "trainable token left in their row\n",
                 static_cast<ull>(s.truncated_examples), s.row_tokens, static_cast<ull>(s.dropped_examples));
  r += strprintf("  fill: %.1f%% of row tokens are example tokens (the rest is padding, never trained on); "
                 "%llu trainable (mask 1) train tokens\n",
                 100.0 * s.fill_fraction, static_cast<ull>(s.trainable_tokens));
  r += strprintf("  unigram entropy of the trainable train tokens: %.4f bits/token = %.4f nats/token\n",
                 s.train_entropy_bits, s.train_entropy_nats);
  return r;
}

}  // namespace meshtrain::data
