// prepare --format alpaca|chat: JSONL records -> rows of seq_len + 1 tokens with a loss mask
// beside the tokens.
//
// Without --pack each example is alone in its row, padded: attention (causal within a row)
// never crosses from one example into another, and the price is the padding, reported as the
// fill fraction. With --pack (packing.cpp) several examples share a row and train.docs /
// val.docs record where each starts; training masks attention, positions and the loss per
// document (doc/data.md, "Packed rows"), so every example still sees only itself.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "build_config.hpp"
#include "core/error.hpp"
#include "data/chat_examples.hpp"
#include "data/chat_prompt.hpp"
#include "data/doc_file.hpp"
#include "data/loss_mask.hpp"
#include "data/text_files.hpp"
#include "data/token_file.hpp"
#include "formats/json.hpp"
#include "packing.hpp"
#include "prepare_internal.hpp"
#include "staged_output.hpp"

namespace meshtrain::data {

void for_each_jsonl_record(const std::vector<std::string>& files, PrepareSummary& s,
                           const std::function<void(const std::string&, std::size_t, const std::string&)>& record) {
  for (const std::string& path : files) {
    const std::string text = read_file_bytes(path);
    std::size_t begin = 0;
    for (std::size_t line_no = 1; begin < text.size(); ++line_no) {
      std::size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(begin, end - begin);
      begin = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are not records
      record(path, line_no, line);
    }
    s.files.push_back(path);
    s.bytes += text.size();
  }
}

std::string template_name(ChatTemplateKind k) { return chat_template_name(k); }

ChatFormat resolve_chat_format(const std::string& name, const Tokenizer& tok) {
  if (name != "auto") return chat_format_by_name(name);
  return recognise_chat_template(tok.name() == "byte" ? std::string() : chat_template_text(tok.name()),
                                 "--tokenizer " + tok.name() + " (--chat_template auto)");
}

namespace {

using ull = unsigned long long;

constexpr const char* kExampleSplitRule =
    "per example: record i (0-based, over all records of all files in path order) goes to val when "
    "floor((i + 1) * val_fraction) > floor(i * val_fraction), i.e. every (1/val_fraction)-th record";

}  // namespace

PrepareSummary prepare_examples(const PrepareOptions& o, const Tokenizer& tok, const std::vector<std::string>& files,
                                PrepareSummary s) {
  const ExampleFormat format = o.format == "alpaca" ? ExampleFormat::Alpaca : ExampleFormat::Chat;
  const ChatFormat chat = resolve_chat_format(o.chat_template, tok);
  const auto R = static_cast<std::uint32_t>(o.seq_len) + 1;  // row: inputs + the shifted last target
  const std::int32_t pad = row_pad_id(tok);
  if (chat.kind == ChatTemplateKind::Alpaca)
    require_special_token(tok, tok.eot_id(), "end-of-text token",
                          "the alpaca template ends every response with it (trained on, so the model learns to stop)");
  require_special_token(tok, pad, "end-of-text token (nor a padding token)",
                        strprintf("prepare --format %s pads every row after its example with the pad id, else "
                                  "end-of-text", o.format.c_str()));
  s.format = o.format;
  s.row_tokens = R;
  s.chat_template = template_name(chat.kind);
  s.chat_system = default_system_message(chat, o.system);
  // Before anything is staged: a marker the model cannot emit as one token is refused.
  require_end_of_turn_token(tok, chat, s.chat_template);

  if (o.pack == PackMode::On) require_packable_rows(R, o.seq_len);
  // The default packs when that saves rows; it keeps the examples until all are known (as
  // --pack does), and rows too long for u16 segment ids are never packed by it.
  const bool keep = o.pack == PackMode::On || (o.pack == PackMode::Auto && R <= kDocFileMaxRow);
  StagedOutput out(o.output);
  RowWriter train(out.stage("train.bin"), out.stage("train.mask"), "", s.vocab_size, R);
  RowWriter val(out.stage("val.bin"), out.stage("val.mask"), "", s.vocab_size, R);
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(s.vocab_size), 0);

  std::uint64_t record = 0;
  std::vector<std::int32_t> row_ids(R);
  std::vector<std::uint8_t> row_mask(R);
  for_each_jsonl_record(files, s, [&](const std::string& path, std::size_t line_no, const std::string& line) {
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
      return;
    }
    if (keep) {
      w.kept.push_back(PackItem{std::vector<std::int32_t>(row_ids.begin(), row_ids.begin() + static_cast<std::ptrdiff_t>(n)),
                                std::vector<std::uint8_t>(row_mask.begin(), row_mask.begin() + static_cast<std::ptrdiff_t>(n))});
    } else {
      w.tokens.append(row_ids.data(), R);
      w.mask.append(row_mask.data(), R);
      ++w.rows;
    }
    ++w.examples;
    w.filled += n;
    w.trainable += trainable;
    if (&w == &train)
      for (std::uint32_t j = 1; j < R; ++j)
        if (row_mask[j]) ++counts[static_cast<std::size_t>(row_ids[j])];
  });
  MESHTRAIN_REQUIRE(train.examples > 0,
                    "no training example: %llu record(s) in %zu file(s), %llu without a trainable token within "
                    "--seq_len %d + 1 tokens, %llu in val; give more examples, a longer --seq_len or a smaller "
                    "--val_fraction",
                    static_cast<ull>(record), files.size(), static_cast<ull>(s.dropped_examples), o.seq_len,
                    static_cast<ull>(val.examples));
  // --pack always packs; the default when packing needs fewer rows than there are examples
  // in either split (some row holds two or more), so that a --seq_len with room for one
  // example only writes the same rows as --pack=false.
  bool pack = o.pack == PackMode::On;
  if (keep && !pack)
    for (RowWriter* w : {&train, &val}) pack = pack || pack_rows(w->kept, R).rows.size() < w->kept.size();
  if (pack) {
    train.docs = std::make_unique<DocFileWriter>(out.stage("train.docs"), R);
    val.docs = std::make_unique<DocFileWriter>(out.stage("val.docs"), R);
  } else if (keep) {
    for (RowWriter* w : {&train, &val}) write_one_per_row(*w, R, pad);
  }
  const std::string meta_tmp = out.stage("meta.json");  // staged last: marks a complete dataset
  finish_row_splits(train, val, R, pad, pack, counts, s);
  s.pack_auto = o.pack == PackMode::Auto && keep;
  write_meta_file(meta_tmp, meta_of_summary(s, o.val_fraction, kExampleSplitRule));
  out.commit();
  return s;
}

std::int32_t row_pad_id(const Tokenizer& tok) { return tok.pad_id() >= 0 ? tok.pad_id() : tok.eot_id(); }

void require_packable_rows(std::uint32_t R, int seq_len) {
  MESHTRAIN_REQUIRE(R <= kDocFileMaxRow, "--pack needs --seq_len below %u (u16 segment ids), got %d", kDocFileMaxRow,
                    seq_len);
}

void finish_row_splits(RowWriter& train, RowWriter& val, std::uint32_t R, std::int32_t pad, bool packed,
                       const std::vector<std::uint64_t>& counts, PrepareSummary& s) {
  if (packed) {
    const PackRule train_rule = write_packed(train, R, pad), val_rule = write_packed(val, R, pad);
    s.pack_rule = train_rule == val_rule ? pack_rule_name(train_rule)
                                         : strprintf("train: %s, val: %s", pack_rule_name(train_rule),
                                                     pack_rule_name(val_rule));
  }
  for (RowWriter* w : {&train, &val}) {
    w->tokens.close();
    w->mask.close();
    if (w->docs) w->docs->close();
  }
  s.train_tokens = train.tokens.count();
  s.val_tokens = val.tokens.count();
  s.train_examples = train.examples;
  s.val_examples = val.examples;
  s.packed = packed;
  s.train_rows = train.rows;
  s.val_rows = val.rows;
  s.trainable_tokens = train.trainable;
  // Before packing: one row per example; after: the rows actually written.
  s.fill_fraction_unpacked =
      static_cast<double>(train.filled + val.filled) / static_cast<double>((train.examples + val.examples) * R);
  s.fill_fraction = static_cast<double>(train.filled + val.filled) / static_cast<double>((train.rows + val.rows) * R);
  set_train_entropy(s, counts);
}

std::string format_examples_summary(const PrepareSummary& s) {
  const std::uint64_t examples = s.train_examples + s.val_examples;
  std::string r = s.format == "text"
                      ? strprintf("  input:   %zu text file(s), %llu bytes; --format text --pack: documents (longer "
                                  "ones cut into pieces of a row) packed into rows, every token trained on\n",
                                  s.files.size(), static_cast<ull>(s.bytes))
                      : strprintf("  input:   %zu JSONL file(s), %llu bytes; --format %s, chat template %s%s\n",
                                  s.files.size(), static_cast<ull>(s.bytes), s.format.c_str(), s.chat_template.c_str(),
                                  s.chat_system.empty()
                                      ? ""
                                      : (", system message " + formats::json_text(formats::Json(s.chat_system)) +
                                         " for records without one")
                                            .c_str());
  if (s.format == "preference") {
    r += strprintf("  pairs:   %llu = train %llu + val %llu, each a chosen and a rejected row of %u tokens (seq_len %u), "
                   "side by side (rows 2i and 2i + 1); %llu rows\n",
                   static_cast<ull>(examples), static_cast<ull>(s.train_examples), static_cast<ull>(s.val_examples),
                   s.row_tokens, s.row_tokens - 1, static_cast<ull>(s.train_rows + s.val_rows));
    r += strprintf("  fill: %.1f%% of row tokens are example tokens (the rest is padding); %llu trainable (mask 1: the "
                   "final responses) train tokens; none truncated (a pair longer than a row is an error)\n",
                   100.0 * s.fill_fraction, static_cast<ull>(s.trainable_tokens));
    r += strprintf("  unigram entropy of the trainable train tokens: %.4f bits/token = %.4f nats/token\n",
                   s.train_entropy_bits, s.train_entropy_nats);
    return r;
  }
  if (s.packed) {
    r += strprintf("  examples: %llu = train %llu + val %llu, packed (%s) into %llu rows = train %llu + val %llu of "
                   "%u tokens (seq_len %u), documents masked from each other%s\n",
                   static_cast<ull>(examples), static_cast<ull>(s.train_examples), static_cast<ull>(s.val_examples),
                   s.pack_rule.c_str(),
                   static_cast<ull>(s.train_rows + s.val_rows), static_cast<ull>(s.train_rows),
                   static_cast<ull>(s.val_rows), s.row_tokens, s.row_tokens - 1,
                   s.pack_auto ? " (packing is the default when examples share rows; --pack=false for one per row)"
                               : "");
    r += strprintf("  fill before packing: %.1f%% (one example per row); after: %.1f%%\n",
                   100.0 * s.fill_fraction_unpacked, 100.0 * s.fill_fraction);
  } else {
    r += strprintf("  examples: %llu = train %llu + val %llu, one padded row of %u tokens each (seq_len %u)%s\n",
                   static_cast<ull>(examples), static_cast<ull>(s.train_examples), static_cast<ull>(s.val_examples),
                   s.row_tokens, s.row_tokens - 1,
                   s.pack_auto ? "; not packed: no two examples fit a row at this --seq_len"
                   : s.fill_fraction < 0.5 ? "; most of each row is padding: --pack puts several examples in a row"
                                           : "");
  }
  if (s.format == "text")
    r += strprintf("  split: %llu document(s) longer than a row, cut into pieces of at most %u tokens; dropped: %llu "
                   "one-token piece(s)\n",
                   static_cast<ull>(s.truncated_examples), s.row_tokens, static_cast<ull>(s.dropped_examples));
  else
    r += strprintf("  truncated: %llu example(s) longer than a row, cut to %u tokens; dropped: %llu with no "
                   "trainable token left in their row\n",
                   static_cast<ull>(s.truncated_examples), s.row_tokens, static_cast<ull>(s.dropped_examples));
  if (s.packed)
    r += strprintf("  trainable: %llu (mask 1) train tokens\n", static_cast<ull>(s.trainable_tokens));
  else
    r += strprintf("  fill: %.1f%% of row tokens are example tokens (the rest is padding, never trained on); "
                   "%llu trainable (mask 1) train tokens\n",
                   100.0 * s.fill_fraction, static_cast<ull>(s.trainable_tokens));
  r += strprintf("  unigram entropy of the trainable train tokens: %.4f bits/token = %.4f nats/token\n",
                 s.train_entropy_bits, s.train_entropy_nats);
  return r;
}

}  // namespace meshtrain::data
