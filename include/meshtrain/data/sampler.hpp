#pragma once
/// \file
/// \brief Training and evaluation windows. A window is seq_len + 1 consecutive tokens:
/// inputs = tokens[start, start + seq_len), targets = tokens[start + 1, start + seq_len + 1).
///
/// The training order is one GLOBAL sequence of windows w = 0, 1, 2, ... that does not
/// depend on the number of ranks; the trainer hands rank d of D data-parallel ranks the
/// windows given by `rank_first_window`, and a checkpoint stores only the cursor (windows
/// consumed). Starts are counter-based hashes, so window w costs O(seq_len) to produce
/// no matter how large w is.

#include <cstdint>
#include <memory>

#include "config/choices.hpp"
#include "data/dataset.hpp"
#include "data/doc_file.hpp"
#include "data/loss_mask.hpp"
#include "data/token_source.hpp"

namespace meshtrain::data {

/// True when `source` holds at least one window (size >= seq_len + 1).
bool has_window(const TokenSource& source, int seq_len);

/// \brief Instruction/chat data (`prepare --format alpaca|chat`): with a loss mask `rows`,
/// the samplers' windows are whole rows (row r = tokens [r * (seq_len + 1), (r + 1) *
/// (seq_len + 1))), one example each, and every target whose mask byte is 0 is written as -1
/// (ignored by the cross-entropy: no loss, no gradient). The row length must equal
/// seq_len + 1: UserError naming the dataset's seq_len and train.seq_len otherwise.
void check_row_seq_len(const MaskFile& rows, int seq_len);

/// \brief What `train` and `eval` check of a dataset before they make its samplers
/// (`command`: "train", "eval"), UserError on every rank alike:
///   - a preference dataset (`prepare --format preference`) goes with train.objective=dpo
///     and only with it: supervised training or evaluation on it would count the rejected
///     responses as targets, and DPO reads nothing but pairs;
///   - the rows of an instruction, chat or packed dataset must be train.seq_len + 1 tokens;
///     the message says what a row holds (one example, or several packed ones) and the
///     --seq_len (and --pack) it was prepared with.
void check_dataset_rows(const Dataset& d, int seq_len, const std::string& command,
                        Objective objective = Objective::Sft);

/// \brief Document masking of the windows (doc/data.md, "Packed rows"): the segment ids of a
/// packed dataset (`docs`, rows only), or for a token stream with `data.document_mask` the
/// end-of-text id `eot` that ends every document. Either way the samplers write every
/// target that crosses a document boundary (the next document's first token predicted from
/// the end of the previous one) as -1, and fill() with `doc_start` gives each token the
/// position in its window where its document starts (model::BatchShape::doc_start).
struct DocumentMask {
  std::shared_ptr<const DocFile> docs;
  std::int32_t eot = -1;
  bool on() const { return docs != nullptr || eot >= 0; }
};

/// The document mask of a dataset's train (or val) split: a packed dataset's segment ids;
/// for a text dataset with `text_document_mask` (data.document_mask) its end-of-text id
/// (UserError when it has none, e.g. random tokens); else none.
DocumentMask document_mask_for(const Dataset& d, bool val, bool text_document_mask);

/// \brief Random training windows: start(w) = counter_hash(stream_key(seed, TrainWindows), w)
/// % (size - seq_len), uniform over every valid start (bias <= (size - seq_len) / 2^64).
class Sampler {
 public:
  /// UserError when the source has fewer than seq_len + 1 tokens (the message says how
  /// many it has and how many are needed) or seq_len < 1.
  Sampler(std::shared_ptr<const TokenSource> source, int seq_len, std::uint64_t seed);
  /// Rows (see check_row_seq_len): window w is row counter_hash(key, w) % rows, uniform over
  /// the examples, with the same rank-independent global order as the stream.
  Sampler(std::shared_ptr<const TokenSource> source, int seq_len, std::uint64_t seed,
          std::shared_ptr<const MaskFile> rows);

  int seq_len() const { return seq_len_; }
  const TokenSource& source() const { return *source_; }
  /// First token of window w.
  std::uint64_t window_start(std::uint64_t w) const;

  /// Windows first_window .. first_window + n_windows - 1, row j of each buffer being
  /// window first_window + j. inputs, targets, doc_start: host (n_windows, seq_len)
  /// row-major; doc_start may be null, and is written only with a document mask.
  void fill(std::uint64_t first_window, int n_windows, std::int32_t* inputs,
            std::int32_t* targets, std::int32_t* doc_start = nullptr) const;
  /// Turns on document masking; UserError when `m.docs` does not match the rows.
  void set_document_mask(DocumentMask m);
  bool document_masked() const { return doc_.on(); }
  /// \brief Preference pairs (`prepare --format preference`: rows 2i and 2i + 1 are pair i's
  /// chosen and rejected responses): windows then come two at a time, window 2k being the
  /// chosen row of pair counter_hash(key, k) % pairs and window 2k + 1 its rejected row. A
  /// micro-batch of an even number of windows starting at an even window (rank_first_window
  /// with an even micro_batch) therefore holds whole pairs, on every rank of any mesh.
  /// UserError for a token stream or an odd number of rows.
  void set_pairs();
  bool pairs() const { return pairs_; }

 private:
  std::shared_ptr<const TokenSource> source_;
  std::shared_ptr<const MaskFile> rows_;  // null: a token stream
  DocumentMask doc_;
  int seq_len_;
  std::uint64_t key_;
  std::uint64_t starts_;  // number of valid starts: size - seq_len; with rows: the number of rows
  bool pairs_ = false;
};

/// \brief Deterministic evaluation windows: window i starts at (i * seq_len) % (size -
/// seq_len), so windows 0 .. windows_per_pass() - 1 tile the source without overlapping
/// inputs, and later ones wrap around.
class EvalSampler {
 public:
  /// Same errors as Sampler.
  EvalSampler(std::shared_ptr<const TokenSource> source, int seq_len);
  /// Rows: window i is row i % rows (each example once per pass, in file order).
  EvalSampler(std::shared_ptr<const TokenSource> source, int seq_len, std::shared_ptr<const MaskFile> rows);

  int seq_len() const { return seq_len_; }
  /// Number of non-overlapping windows before the starts wrap: (size - 1) / seq_len; with rows, the rows.
  std::uint64_t windows_per_pass() const;
  std::uint64_t window_start(std::uint64_t i) const;
  /// Same layout as Sampler::fill.
  void fill(std::uint64_t first_window, int n_windows, std::int32_t* inputs,
            std::int32_t* targets, std::int32_t* doc_start = nullptr) const;
  /// As Sampler::set_document_mask.
  void set_document_mask(DocumentMask m);
  bool document_masked() const { return doc_.on(); }

 private:
  std::shared_ptr<const TokenSource> source_;
  std::shared_ptr<const MaskFile> rows_;
  DocumentMask doc_;
  int seq_len_;
  std::uint64_t starts_;  // with rows: the number of rows
};

/// \brief The global index of the first window of a micro-batch: rank `dp_rank` of
/// `dp_size` data-parallel ranks, micro-step `micro_step`, `micro_batch` windows per rank
/// per micro-batch, at `cursor` windows consumed before this optimizer step:
/// cursor + micro_step * (micro_batch * dp_size) + dp_rank * micro_batch. Its windows are that
/// index and the next micro_batch - 1. One step consumes grad_accum * micro_batch * dp_size windows, and for a
/// fixed global batch the union over ranks is the same for every dp_size.
std::uint64_t rank_first_window(std::uint64_t cursor, int micro_step, int micro_batch, int dp_size,
                                int dp_rank);

}  // namespace meshtrain::data
