#include "data/sampler.hpp"

#include <vector>

#include "core/error.hpp"
#include "data/hash.hpp"

namespace meshtrain::data {
namespace {

using ull = unsigned long long;

// Number of valid window starts (size - seq_len); UserError when there is none.
std::uint64_t count_starts(const std::shared_ptr<const TokenSource>& source, int seq_len) {
  MESHTRAIN_ASSERT(source != nullptr, "sampler without a token source");
  MESHTRAIN_REQUIRE(seq_len >= 1, "the sequence length must be at least 1, got %d", seq_len);
  MESHTRAIN_REQUIRE(has_window(*source, seq_len),
                    "%s has %llu tokens, too few for one window of seq_len + 1 = %llu tokens; use more "
                    "text or a shorter train.seq_len",
                    source->description().c_str(), static_cast<ull>(source->size()),
                    static_cast<ull>(seq_len) + 1);
  return source->size() - static_cast<std::uint64_t>(seq_len);
}

// Number of example rows; UserError when the row length is not seq_len + 1 or there is none.
std::uint64_t count_rows(const std::shared_ptr<const TokenSource>& source, int seq_len, const MaskFile& rows) {
  MESHTRAIN_ASSERT(source != nullptr, "sampler without a token source");
  check_row_seq_len(rows, seq_len);
  MESHTRAIN_REQUIRE(rows.size() == source->size(), "%s holds %llu mask bytes but %s holds %llu tokens; the dataset "
                    "is inconsistent, re-run `meshtrain prepare`",
                    rows.path().c_str(), static_cast<ull>(rows.size()), source->description().c_str(),
                    static_cast<ull>(source->size()));
  MESHTRAIN_REQUIRE(source->size() >= rows.row_tokens(), "%s holds no example; prepare more examples",
                    source->description().c_str());
  return source->size() / rows.row_tokens();
}

// Document masking of one window (inputs, targets, doc_start: seq_len each) starting at s.
void mask_documents(const DocumentMask& dm, std::uint64_t s, int seq_len, const std::int32_t* inputs,
                    std::int32_t* targets, std::int32_t* doc_start) {
  if (dm.docs) {
    std::vector<std::uint16_t> seg(static_cast<std::size_t>(seq_len) + 1);
    dm.docs->read_row(s, seq_len + 1, seg.data());  // inputs and the shifted last target
    doc_starts_from_segments(seg.data(), seq_len, doc_start);
    for (int t = 0; t < seq_len; ++t)
      if (seg[static_cast<std::size_t>(t) + 1] != seg[static_cast<std::size_t>(t)]) targets[t] = -1;
    return;
  }
  // A token stream: a document ends with (and includes) eot; what follows is the next one.
  for (int t = 0; t < seq_len; ++t) {
    doc_start[t] = t == 0 ? 0 : (inputs[t - 1] == dm.eot ? t : doc_start[t - 1]);
    if (inputs[t] == dm.eot) targets[t] = -1;
  }
}

// Row j of inputs/targets (each (n, seq_len)) = window first + j, starting at start_of(first + j).
// With a mask, targets whose mask byte is 0 become -1 (ignored by the loss). With a document
// mask, so do the targets that cross a document boundary, and doc_start (may be null) gets
// each token's document start.
template <class StartOf>
void fill_windows(const TokenSource& src, const MaskFile* mask, const DocumentMask& dm, int seq_len,
                  std::uint64_t first, int n, std::int32_t* inputs, std::int32_t* targets, std::int32_t* doc_start,
                  StartOf start_of) {
  std::vector<std::uint8_t> m(mask ? static_cast<std::size_t>(seq_len) : 0);
  std::vector<std::int32_t> scratch(dm.on() && doc_start == nullptr ? static_cast<std::size_t>(seq_len) : 0);
  for (int j = 0; j < n; ++j) {
    const std::uint64_t s = start_of(first + static_cast<std::uint64_t>(j));
    const std::size_t row = static_cast<std::size_t>(j) * static_cast<std::size_t>(seq_len);
    src.read(s, seq_len, inputs + row);
    src.read(s + 1, seq_len, targets + row);
    if (dm.on())
      mask_documents(dm, s, seq_len, inputs + row, targets + row, doc_start ? doc_start + row : scratch.data());
    if (!mask) continue;
    mask->read(s + 1, seq_len, m.data());
    for (int t = 0; t < seq_len; ++t)
      if (!m[static_cast<std::size_t>(t)]) targets[row + static_cast<std::size_t>(t)] = -1;
  }
}

// Segment ids go with rows of the same length and count as the tokens.
void check_document_mask(const DocumentMask& m, const MaskFile* rows, const TokenSource& src) {
  if (!m.docs) return;
  MESHTRAIN_REQUIRE(rows != nullptr && m.docs->row_tokens() == rows->row_tokens() && m.docs->size() == src.size(),
                    "%s (%llu segment ids, rows of %u) does not match %s (%llu tokens%s); the dataset is inconsistent, "
                    "re-run `meshtrain prepare --pack`",
                    m.docs->path().c_str(), static_cast<ull>(m.docs->size()), m.docs->row_tokens(),
                    src.description().c_str(), static_cast<ull>(src.size()),
                    rows ? strprintf(", rows of %u", rows->row_tokens()).c_str() : ", a stream without rows");
}

}  // namespace

DocumentMask document_mask_for(const Dataset& d, bool val, bool text_document_mask) {
  DocumentMask m;
  if (d.meta.packed) {
    m.docs = val ? d.val_docs : d.train_docs;
  } else if (text_document_mask && d.meta.row_tokens == 0) {
    MESHTRAIN_REQUIRE(d.meta.eot_id >= 0, "data.document_mask = true needs documents ended by an end-of-text token, "
                      "but %s has none (random tokens?); set data.document_mask = false",
                      d.dir.c_str());
    m.eot = d.meta.eot_id;
  }
  return m;
}

bool has_window(const TokenSource& source, int seq_len) {
  return seq_len >= 1 && source.size() >= static_cast<std::uint64_t>(seq_len) + 1;
}

void check_row_seq_len(const MaskFile& rows, int seq_len) {
  // The mask file alone does not say how many examples a row holds (check_dataset_rows,
  // which has meta.json, does): rows of the wrong length, said neutrally.
  MESHTRAIN_REQUIRE(seq_len >= 1 && static_cast<std::uint64_t>(seq_len) + 1 == rows.row_tokens(),
                    "train.seq_len is %d, but the dataset of %s holds rows of %u tokens (prepared with --seq_len "
                    "%u): set train.seq_len=%u, or prepare the dataset again with --seq_len %d",
                    seq_len, rows.path().c_str(), rows.row_tokens(), rows.row_tokens() - 1, rows.row_tokens() - 1,
                    seq_len);
}

void check_dataset_rows(const Dataset& d, int seq_len, const std::string& command, Objective objective) {
  const DatasetMeta& m = d.meta;
  const bool pairs = m.data_format == "preference";
  MESHTRAIN_REQUIRE(!pairs || objective != Objective::Sft,
                    "%s: data.dir=%s is a preference dataset (prepare --format preference: each example a chosen and "
                    "a rejected response, in adjacent rows); supervised training or evaluation on it "
                    "(train.objective=sft) would count the rejected responses as targets: set train.objective=dpo "
                    "(or simpo) for preference training, or prepare the chosen responses with --format chat for supervised "
                    "fine-tuning",
                    command.c_str(), d.dir.c_str());
  MESHTRAIN_REQUIRE(pairs || objective == Objective::Sft,
                    "%s: train.objective=%s needs a dataset of preference pairs (prepare --format preference: a "
                    "prompt with a chosen and a rejected response), but data.dir=%s is %s; give a preference dataset, "
                    "or train.objective=sft",
                    command.c_str(), choice_name(objective), d.dir.c_str(),
                    d.dir.empty() || m.tokenizer == "random" ? "random tokens"
                                                             : strprintf("a %s dataset", m.data_format.c_str()).c_str());
  if (m.row_tokens == 0 || (seq_len >= 1 && static_cast<std::uint64_t>(seq_len) + 1 == m.row_tokens)) return;
  const unsigned prepared = m.row_tokens - 1;
  const char* pack = m.packed ? " --pack" : "";
  const std::string holds =
      m.packed ? strprintf("packed rows of %u tokens, several examples each (prepared with --seq_len %u --pack)",
                           m.row_tokens, prepared)
               : strprintf("one example per row of %u tokens (prepared with --seq_len %u)", m.row_tokens, prepared);
  throw UserError(strprintf("train.seq_len is %d, but the dataset of %s holds %s: set train.seq_len=%u, or prepare "
                            "the dataset again with --seq_len %d%s",
                            seq_len, d.dir.c_str(), holds.c_str(), prepared, seq_len, pack));
}

Sampler::Sampler(std::shared_ptr<const TokenSource> source, int seq_len, std::uint64_t seed)
    : source_(std::move(source)), seq_len_(seq_len), key_(stream_key(seed, HashStream::TrainWindows)),
      starts_(count_starts(source_, seq_len)) {}

Sampler::Sampler(std::shared_ptr<const TokenSource> source, int seq_len, std::uint64_t seed,
                 std::shared_ptr<const MaskFile> rows)
    : source_(std::move(source)), rows_(std::move(rows)), seq_len_(seq_len),
      key_(stream_key(seed, HashStream::TrainWindows)),
      starts_(rows_ ? count_rows(source_, seq_len, *rows_) : count_starts(source_, seq_len)) {}

std::uint64_t Sampler::window_start(std::uint64_t w) const {
  if (pairs_) return (2 * (counter_hash(key_, w / 2) % (starts_ / 2)) + w % 2) * rows_->row_tokens();
  const std::uint64_t h = counter_hash(key_, w) % starts_;
  return rows_ ? h * rows_->row_tokens() : h;
}

void Sampler::set_pairs() {
  MESHTRAIN_REQUIRE(rows_ != nullptr && starts_ % 2 == 0,
                    "%s is not a dataset of preference pairs (%s); prepare it with --format preference",
                    source_->description().c_str(),
                    rows_ ? strprintf("%llu rows, an odd number", static_cast<ull>(starts_)).c_str() : "a token stream");
  pairs_ = true;
}

void Sampler::fill(std::uint64_t first_window, int n_windows, std::int32_t* inputs,
                   std::int32_t* targets, std::int32_t* doc_start) const {
  fill_windows(*source_, rows_.get(), doc_, seq_len_, first_window, n_windows, inputs, targets, doc_start,
               [this](std::uint64_t w) { return window_start(w); });
}

void Sampler::set_document_mask(DocumentMask m) {
  check_document_mask(m, rows_.get(), *source_);
  doc_ = std::move(m);
}

EvalSampler::EvalSampler(std::shared_ptr<const TokenSource> source, int seq_len)
    : source_(std::move(source)), seq_len_(seq_len), starts_(count_starts(source_, seq_len)) {}

EvalSampler::EvalSampler(std::shared_ptr<const TokenSource> source, int seq_len, std::shared_ptr<const MaskFile> rows)
    : source_(std::move(source)), rows_(std::move(rows)), seq_len_(seq_len),
      starts_(rows_ ? count_rows(source_, seq_len, *rows_) : count_starts(source_, seq_len)) {}

std::uint64_t EvalSampler::windows_per_pass() const {
  if (rows_) return starts_;
  return (source_->size() - 1) / static_cast<std::uint64_t>(seq_len_);
}

std::uint64_t EvalSampler::window_start(std::uint64_t i) const {
  if (rows_) return (i % starts_) * rows_->row_tokens();
  // 128-bit product: i * seq_len may exceed 2^64 for a cursor far into a long eval.
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(i) * static_cast<unsigned>(seq_len_) % starts_);
}

void EvalSampler::fill(std::uint64_t first_window, int n_windows, std::int32_t* inputs,
                       std::int32_t* targets, std::int32_t* doc_start) const {
  fill_windows(*source_, rows_.get(), doc_, seq_len_, first_window, n_windows, inputs, targets, doc_start,
               [this](std::uint64_t i) { return window_start(i); });
}

void EvalSampler::set_document_mask(DocumentMask m) {
  check_document_mask(m, rows_.get(), *source_);
  doc_ = std::move(m);
}

std::uint64_t rank_first_window(std::uint64_t cursor, int micro_step, int micro_batch, int dp_size, int dp_rank) {
  MESHTRAIN_ASSERT(micro_batch >= 1 && dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size && micro_step >= 0,
                   "bad window layout: micro_step %d, micro_batch %d, dp rank %d of %d", micro_step, micro_batch, dp_rank,
                   dp_size);
  const auto m = static_cast<std::uint64_t>(micro_batch);
  return cursor + static_cast<std::uint64_t>(micro_step) * m * static_cast<std::uint64_t>(dp_size) +
         static_cast<std::uint64_t>(dp_rank) * m;
}

}  // namespace meshtrain::data
