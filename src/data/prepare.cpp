#include "data/prepare.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "build_config.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "data/dataset.hpp"
#include "data/text_files.hpp"
#include "data/token_file.hpp"
#include "data/tokenizer.hpp"
#include "packing.hpp"
#include "prepare_internal.hpp"
#include "staged_output.hpp"

namespace meshtrain::data {
namespace {

using ull = unsigned long long;

/// The longest row `prepare --format alpaca|chat` writes: train.seq_len's own bound.
constexpr int kMaxPrepareSeqLen = 1 << 22;

constexpr const char* kValSplitRule =
    "per document: the text from the line start nearest to (1 - val_fraction) of its bytes goes to "
    "val, the text before it to train; each non-empty piece ends with eot";

// The ids of one piece of a document, handed to `take` as the tokenizer gives them over, a
// stretch at a time: BOS first when the tokenizer's model expects one, then the text, then
// the end-of-text id. A failure of `take` (a full disk writing the dataset: status 74) keeps
// its message and status; a tokenizer's refusal of the text is named by its file.
void for_each_piece_id(const Tokenizer& tok, const std::string& path, const std::string& text,
                       const Tokenizer::IdSink& take) {
  if (tok.add_bos() && tok.bos_id() >= 0) {
    const std::int32_t bos = tok.bos_id();
    take(&bos, 1);
  }
  try {
    tok.encode_into(text, take);
  } catch (const UserError& e) {
    if (e.exit_status() == kExitIoError) throw;
    throw UserError(strprintf("%s: %s", path.c_str(), e.what()), e.exit_status());
  }
  const std::int32_t eot = tok.eot_id();
  take(&eot, 1);
}

// The ids of one piece of a document, together (for --pack, which cuts them into rows).
std::vector<std::int32_t> piece_ids(const Tokenizer& tok, const std::string& path, const std::string& text) {
  std::vector<std::int32_t> ids;
  for_each_piece_id(tok, path, text, [&](const std::int32_t* p, std::size_t n) { ids.insert(ids.end(), p, p + n); });
  return ids;
}

// Tokenizes one piece of a document straight into `out`: a large document never has all its
// ids (or its tokenizer's working memory) in memory at once. The same ids as piece_ids.
void append_piece(const Tokenizer& tok, const std::string& path, const std::string& text, TokenFileWriter& out,
                  std::vector<std::uint64_t>* counts) {
  if (text.empty()) return;
  for_each_piece_id(tok, path, text, [&](const std::int32_t* ids, std::size_t n) {
    out.append(ids, n);
    if (counts)
      for (std::size_t i = 0; i < n; ++i) ++(*counts)[static_cast<std::size_t>(ids[i])];
  });
}

// Where a tokenizer's special ids come from, for the messages below.
constexpr const char* kBosSources =
    "bos_token in tokenizer_config.json, the SentencePiece model's bos piece, tokenizer.ggml.bos_token_id of a GGUF "
    "file";
constexpr const char* kEosSources =
    "<|endoftext|>, or an end-of-sequence token: eos_token in tokenizer_config.json, the SentencePiece model's eos "
    "piece, tokenizer.ggml.eos_token_id of a GGUF file";

std::string list_some(const std::vector<std::string>& items, std::size_t max) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < max; ++i) s += "\n    " + items[i];
  if (items.size() > max) s += strprintf("\n    ... and %zu more", items.size() - max);
  return s;
}

// The input files, less the files of the dataset being replaced: an earlier run's train.bin,
// meta.json, ... directly in `output` (found when it lies inside an input and is not yet, or
// no longer, a complete dataset that collect_input_files skips whole). Any other input file
// inside `output` is an error: the dataset would sit beside it, and a later prepare of the
// inputs skips a dataset's directory whole, that file with it -- so prepare neither drops it
// now nor makes it drop out later; the dataset gets a directory of its own.
std::vector<std::string> outside_of(const std::vector<std::string>& files, const std::string& output,
                                    const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path out = fs::canonical(output, ec);
  if (ec || !fs::is_directory(out)) return files;  // nothing can be inside it
  const auto within = [](const fs::path& p, const fs::path& dir) {
    const auto rel = p.lexically_relative(dir);
    return !rel.empty() && *rel.begin() != "..";
  };
  const auto replaced = [&](const fs::path& c) {  // a file of the dataset in `output`
    return c.parent_path() == out && is_dataset_file_name(c.filename().string());
  };
  std::vector<std::string> kept, inside;
  std::set<std::string> inside_canonical;
  for (const std::string& f : files) {
    const fs::path c = fs::canonical(f, ec);
    if (ec || !within(c, out)) {
      kept.push_back(f);
    } else if (!replaced(c)) {
      inside.push_back(f);
      inside_canonical.insert(c.string());
    }
  }
  // An earlier dataset in `output` is skipped whole by collect_input_files, with only a
  // notice, and so is text beside it: under an input directory, `output` is looked into here.
  const bool under_input = std::any_of(inputs.begin(), inputs.end(), [&](const std::string& in) {
    std::error_code e;
    const fs::path c = fs::canonical(in, e);
    return !e && fs::is_directory(c) && (c == out || within(out, c));
  });
  if (under_input) {
    for (fs::recursive_directory_iterator it(out, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      const fs::path c = fs::canonical(it->path(), ec);
      if (ec || !fs::is_regular_file(c) || c.extension() == ".dat" || replaced(c)) continue;
      if (inside_canonical.insert(c.string()).second)
        inside.push_back((fs::path(output) / it->path().lexically_relative(out)).string());
    }
    std::sort(inside.begin(), inside.end());
  }
  MESHTRAIN_REQUIRE(inside.empty(),
                    "%zu input file(s) lie inside the output directory %s, where the dataset would sit beside them "
                    "(and a later prepare skips a dataset's directory whole, text and all):%s\n"
                    "  give --output a directory of its own, outside the inputs, or move the files out of it",
                    inside.size(), output.c_str(), list_some(inside, 10).c_str());
  return kept;
}


}  // namespace

DatasetMeta meta_of_summary(const PrepareSummary& s, double val_fraction, const std::string& val_split) {
  DatasetMeta meta;
  meta.tokenizer = s.tokenizer;
  meta.tokenizer_kind = s.tokenizer_kind;
  meta.tokenizer_hash = s.tokenizer_hash;
  meta.vocab_size = s.vocab_size;
  meta.eot_id = s.eot_id;
  meta.bos_id = s.bos_id;
  meta.eos_id = s.eos_id;
  meta.pad_id = s.pad_id;
  meta.add_bos = s.add_bos;
  meta.train_tokens = s.train_tokens;
  meta.val_tokens = s.val_tokens;
  meta.val_fraction = val_fraction;
  meta.val_split = val_split;
  meta.bytes = s.bytes;
  meta.source_files = s.files;
  meta.train_entropy_bits = s.train_entropy_bits;
  meta.meshtrain_version = MESHTRAIN_VERSION;
  if (s.row_tokens > 0) {
    meta.data_format = s.format;
    meta.row_tokens = s.row_tokens;
    meta.chat_template = s.chat_template;
    if (!s.chat_template.empty()) meta.chat_system = s.chat_system;
    meta.train_examples = s.train_examples;
    meta.val_examples = s.val_examples;
    meta.truncated_examples = s.truncated_examples;
    meta.dropped_examples = s.dropped_examples;
    meta.fill_fraction = s.fill_fraction;
    meta.packed = s.packed;
    meta.train_rows = s.train_rows;
    meta.val_rows = s.val_rows;
    meta.fill_fraction_unpacked = s.fill_fraction_unpacked;
  }
  return meta;
}

void write_meta_file(const std::string& path, const DatasetMeta& meta) {
  const std::string text = meta_to_json(meta);
  file_io::write_file(path, text);
}

void require_special_token(const Tokenizer& tok, std::int32_t id, const char* token, const std::string& need) {
  if (id >= 0) return;
  const bool bos = std::string(token) == kBosToken;
  throw UserError(strprintf("the tokenizer %s has no %s (%s)%s; %s: %s", tok.name().c_str(), token,
                            bos ? kBosSources : kEosSources,
                            bos ? " but asks for one before each sequence (add_bos_token)" : "", need.c_str(),
                            bos ? "set add_bos_token to false in tokenizer_config.json, or give the model's tokenizer "
                                  "with its BOS"
                                : "give the model's tokenizer with its end-of-sequence token, or name one with "
                                  "eos_token in tokenizer_config.json"));
}

bool example_in_val(std::uint64_t index, double val_fraction) {
  if (val_fraction <= 0) return false;
  return std::floor(static_cast<double>(index + 1) * val_fraction) > std::floor(static_cast<double>(index) * val_fraction);
}

std::size_t val_split_point(const std::string& text, double val_fraction) {
  const std::size_t n = text.size();
  if (val_fraction <= 0 || n == 0) return n;
  auto cut = static_cast<std::size_t>(std::floor(static_cast<double>(n) * (1.0 - val_fraction)));
  if (cut >= n) return n;
  if (cut > 0 && text[cut - 1] == '\n') return cut;
  // Line starts strictly inside the document: the last one before the cut, the first after.
  const std::size_t prev_nl = cut >= 2 ? text.rfind('\n', cut - 2) : std::string::npos;
  const std::size_t next_nl = text.find('\n', cut);
  const bool has_prev = prev_nl != std::string::npos;
  const bool has_next = next_nl != std::string::npos && next_nl + 1 < n;
  if (has_next && (!has_prev || next_nl + 1 - cut <= cut - (prev_nl + 1))) return next_nl + 1;
  if (has_prev) return prev_nl + 1;
  while (cut < n && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;  // UTF-8 boundary
  return cut;
}

double unigram_entropy_bits(const std::vector<std::uint64_t>& counts) {
  double total = 0;
  for (const std::uint64_t c : counts) total += static_cast<double>(c);
  if (total == 0) return 0;
  double h = 0;
  for (const std::uint64_t c : counts)
    if (c) {
      const double p = static_cast<double>(c) / total;
      h -= p * std::log2(p);
    }
  return h;
}

void set_train_entropy(PrepareSummary& s, const std::vector<std::uint64_t>& counts) {
  s.train_entropy_bits = unigram_entropy_bits(counts);
  s.train_entropy_nats = s.train_entropy_bits * std::log(2.0);
}

namespace {

/// The text inputs in order: a file that is not UTF-8 text (text_rejection) is listed in
/// s.skipped; every other goes to `each(path, text, cut)`, `cut` its train/val split point
/// (val_split_point), and is counted in s.files and s.bytes.
template <class Each>
void for_each_text_file(const std::vector<std::string>& files, double val_fraction, PrepareSummary& s, Each&& each) {
  for (const std::string& path : files) {
    const std::string text = read_file_bytes(path);
    const std::string why = text_rejection(text);
    if (!why.empty()) {
      s.skipped.push_back(path + ": " + why);
      continue;
    }
    each(path, text, val_split_point(text, val_fraction));
    s.files.push_back(path);
    s.bytes += text.size();
  }
}

/// UserError when the corpus gave nothing to train on (`nonempty` false), listing the files
/// it skipped.
void require_corpus(bool nonempty, const std::vector<std::string>& files, const PrepareSummary& s) {
  MESHTRAIN_REQUIRE(nonempty, "the corpus is empty: none of the %zu input files is a non-empty UTF-8 text file:%s",
                    files.size(), list_some(s.skipped, 10).c_str());
}

// prepare --format text --pack: every document piece (train part, val part, as for the token
// stream) is cut into pieces of at most a row, and the pieces are packed into rows with
// packing.hpp's pack_rows, all their tokens trained on (mask 1; padding 0).
PrepareSummary prepare_text_packed(const PrepareOptions& o, const Tokenizer& tok, const std::vector<std::string>& files,
                                   PrepareSummary s) {
  const auto R = static_cast<std::uint32_t>(o.seq_len) + 1;
  require_packable_rows(R, o.seq_len);
  const std::int32_t pad = row_pad_id(tok);
  s.format = "text";
  s.row_tokens = R;
  StagedOutput out(o.output);
  RowWriter train(out.stage("train.bin"), out.stage("train.mask"), out.stage("train.docs"), s.vocab_size, R);
  RowWriter val(out.stage("val.bin"), out.stage("val.mask"), out.stage("val.docs"), s.vocab_size, R);
  const std::string meta_tmp = out.stage("meta.json");
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(s.vocab_size), 0);
  for_each_text_file(files, o.val_fraction, s, [&](const std::string& path, const std::string& text, std::size_t cut) {
    for (RowWriter* w : {&train, &val}) {
      const std::string piece = w == &train ? text.substr(0, cut) : text.substr(cut);
      if (piece.empty()) continue;
      const std::vector<std::int32_t> ids = piece_ids(tok, path, piece);
      // A document longer than a row becomes several (each attends only to itself).
      if (ids.size() > R) ++s.truncated_examples;
      for (std::size_t at = 0; at < ids.size(); at += R) {
        const std::size_t n = std::min<std::size_t>(R, ids.size() - at);
        if (n < 2) {  // one token: no target inside it
          ++s.dropped_examples;
          continue;
        }
        w->kept.push_back(PackItem{std::vector<std::int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(at),
                                                             ids.begin() + static_cast<std::ptrdiff_t>(at + n)),
                                   std::vector<std::uint8_t>(n, 1)});
        ++w->examples;
        w->filled += n;
        w->trainable += w == &train ? n - 1 : 0;
        if (w == &train)
          for (std::size_t j = at + 1; j < at + n; ++j) ++counts[static_cast<std::size_t>(ids[j])];
      }
    }
  });
  require_corpus(train.examples > 0, files, s);
  finish_row_splits(train, val, R, pad, true, counts, s);

  write_meta_file(meta_tmp,
                  meta_of_summary(s, o.val_fraction, std::string(kValSplitRule) + "; then cut into pieces of at most a row, packed"));
  out.commit();
  return s;
}

}  // namespace

PrepareSummary prepare(const PrepareOptions& o) {
  MESHTRAIN_REQUIRE(!o.inputs.empty(), "no input given; pass --input with text files or directories");
  MESHTRAIN_REQUIRE(!o.output.empty(), "no output directory given; pass --output DIR");
  MESHTRAIN_REQUIRE(std::isfinite(o.val_fraction) && o.val_fraction >= 0 && o.val_fraction < 1,
                    "--val_fraction must be in [0, 1), got %g", o.val_fraction);
  MESHTRAIN_REQUIRE(o.format == "text" || o.format == "alpaca" || o.format == "chat" || o.format == "preference",
                    "--format must be text, alpaca, chat or preference, not '%s'", o.format.c_str());
  const bool examples = o.format != "text";
  const bool pack_on = o.pack == PackMode::On;
  const bool rows = examples || pack_on;  // rows of seq_len + 1 tokens, not a token stream
  MESHTRAIN_REQUIRE(examples || (o.system.empty() && o.chat_template == "auto"),
                    "--chat_template and --system apply to --format alpaca, chat and preference only");
  MESHTRAIN_REQUIRE(rows || o.seq_len == 0,
                    "--seq_len applies to --format alpaca, chat and preference and to --pack; --format text writes a "
                    "token stream that training cuts into windows of train.seq_len");
  MESHTRAIN_REQUIRE(!rows || o.seq_len >= 1,
                    "--format %s%s needs --seq_len N (>= 1, the model's train.seq_len): the rows are N + 1 tokens%s",
                    o.format.c_str(), pack_on ? " --pack" : "", o.seq_len == 0 ? "" : strprintf(", got %d", o.seq_len).c_str());
  // Every example is padded to a full row, in memory and on disk: a --seq_len longer than
  // any train.seq_len can use (2^22, config.cpp) only writes padding (4 GiB per example at
  // 10^9, and a std::bad_alloc first).
  MESHTRAIN_REQUIRE(!rows || o.seq_len <= kMaxPrepareSeqLen,
                    "--seq_len %d is longer than the longest train.seq_len (%d): a row of --seq_len + 1 tokens is "
                    "written for every example; give the model's train.seq_len",
                    o.seq_len, kMaxPrepareSeqLen);
  // A tokenizer file is recorded by its absolute path, so training from another directory
  // can make the same tokenizer again.
  std::string spec = o.tokenizer;
  if (spec != "byte" && std::filesystem::exists(spec)) spec = std::filesystem::absolute(spec).lexically_normal().string();
  const std::unique_ptr<Tokenizer> tok = o.open_tokenizer ? o.open_tokenizer(spec) : make_tokenizer(spec);
  // A special token the format writes must exist: an id of -1 would reach the token file.
  if (tok->add_bos())
    require_special_token(*tok, tok->bos_id(), kBosToken, "prepare puts it before every document");
  if (!examples)
    require_special_token(*tok, tok->eot_id(), "end-of-text token",
                          "prepare --format text ends every document with it");
  const std::vector<std::string> found = collect_input_files(o.inputs);
  const std::vector<std::string> files = outside_of(found, o.output, o.inputs);
  MESHTRAIN_REQUIRE(!files.empty(),
                    "no input files found in %s (directories are searched recursively; *.dat files are ignored%s)",
                    join(o.inputs, ", ").c_str(),
                    found.empty() ? "" : strprintf("; the %zu found are files of the dataset in --output %s, which "
                                                   "prepare replaces", found.size(), o.output.c_str()).c_str());

  PrepareSummary s;
  s.tokenizer = tok->name();
  s.tokenizer_kind = tok->kind();
  s.tokenizer_hash = tok->hash();
  s.vocab_size = tok->vocab_size();
  s.eot_id = tok->eot_id();
  s.bos_id = tok->bos_id();
  s.eos_id = tok->eos_id();
  s.pad_id = tok->pad_id();
  s.add_bos = tok->add_bos();
  s.output = o.output;
  if (o.format == "preference") return prepare_preference(o, *tok, files, s);
  if (examples) return prepare_examples(o, *tok, files, s);
  if (pack_on) return prepare_text_packed(o, *tok, files, s);
  StagedOutput out(o.output);
  TokenFileWriter train(out.stage("train.bin"), s.vocab_size);
  TokenFileWriter val(out.stage("val.bin"), s.vocab_size);
  const std::string meta_tmp = out.stage("meta.json");  // staged last: marks a complete dataset
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(s.vocab_size), 0);

  for_each_text_file(files, o.val_fraction, s, [&](const std::string& path, const std::string& text, std::size_t cut) {
    append_piece(*tok, path, text.substr(0, cut), train, &counts);
    append_piece(*tok, path, text.substr(cut), val, nullptr);
  });
  require_corpus(!s.files.empty(), files, s);
  train.close();
  val.close();
  s.train_tokens = train.count();
  s.val_tokens = val.count();
  set_train_entropy(s, counts);

  write_meta_file(meta_tmp, meta_of_summary(s, o.val_fraction, kValSplitRule));
  out.commit();
  return s;
}

std::string format_summary(const PrepareSummary& s) {
  std::string r = strprintf("prepared %s with the %s tokenizer (vocab %lld, end-of-text id %d)\n",
                            s.output.c_str(), s.tokenizer.c_str(), static_cast<long long>(s.vocab_size), s.eot_id);
  if (s.tokenizer_kind != "byte")
    r += strprintf("  tokenizer: %s, bos %d%s, eos %d, pad %d, hash %s\n", s.tokenizer_kind.c_str(), s.bos_id,
                   s.add_bos ? " (added before each document piece)" : "", s.eos_id, s.pad_id, s.tokenizer_hash.c_str());
  if (s.row_tokens > 0) return r + format_examples_summary(s);
  r += strprintf("  input:   %zu file(s), %llu bytes (%s)\n", s.files.size(), static_cast<ull>(s.bytes),
                 format_bytes(static_cast<double>(s.bytes)).c_str());
  if (!s.skipped.empty())
    r += strprintf("  skipped: %zu file(s) that are not text:%s\n", s.skipped.size(), list_some(s.skipped, 10).c_str());
  const double total = static_cast<double>(s.train_tokens + s.val_tokens);
  r += strprintf("  tokens:  %llu = train %llu + val %llu (%.2f%% val)\n",
                 static_cast<ull>(s.train_tokens + s.val_tokens), static_cast<ull>(s.train_tokens),
                 static_cast<ull>(s.val_tokens), total > 0 ? 100.0 * static_cast<double>(s.val_tokens) / total : 0.0);
  r += strprintf("  train unigram entropy: %.4f bits/token = %.4f nats/token "
                 "(the loss of a model that knows only token frequencies)\n",
                 s.train_entropy_bits, s.train_entropy_nats);
  return r;
}

}  // namespace meshtrain::data
