#pragma once
// Bin packing of examples into rows (prepare --pack). Private to src/data.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/doc_file.hpp"
#include "data/loss_mask.hpp"
#include "data/token_file.hpp"

namespace meshtrain::data {

/// One example to pack: its tokens and loss-mask bytes (same length, at most a row).
struct PackItem {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
};

/// One packed row: indices into the items, in the order they sit in the row.
struct PackedRow {
  std::vector<std::size_t> items;
  std::uint32_t used = 0;
};

/// How pack_rows placed the items.
enum class PackRule {
  ShuffledFirstFit,    ///< first fit, the items in a fixed shuffled order
  FirstFitDecreasing,  ///< first fit, the items by length, longest first
};

/// Its name in prepare's summary.
const char* pack_rule_name(PackRule rule);

/// Rows and the rule that made them.
struct PackedRows {
  std::vector<PackedRow> rows;
  PackRule rule = PackRule::ShuffledFirstFit;
};

/// First fit: the items in `order`, each into the first row (lowest index) with room for it,
/// a new row when none has. O(n log n) with a max-tree over the rows' free space.
std::vector<PackedRow> first_fit_rows(const std::vector<PackItem>& items, const std::vector<std::size_t>& order,
                                      std::uint32_t row_tokens);

/// First-fit decreasing: first fit with the items by length, longest first (ties: input
/// order). At most 11/9 OPT + 6/9 rows, but it groups items of the same length in a row.
std::vector<PackedRow> pack_rows_decreasing(const std::vector<PackItem>& items, std::uint32_t row_tokens);

/// First fit with the items in a fixed pseudo-random order (SplitMix64 of the item index
/// under HashStream::PackOrder's key: it depends only on the number of items), so a row holds
/// examples of unrelated lengths, as randomly drawn one-per-row examples would be.
std::vector<PackedRow> pack_rows_shuffled(const std::vector<PackItem>& items, std::uint32_t row_tokens);

/// The packing of prepare --pack (doc/data.md, "Packed rows"): the shuffled first fit, unless
/// it needs more rows than first-fit decreasing, then first-fit decreasing. So the rows are
/// never more than first-fit decreasing's, and mix lengths (and what follows the length: a
/// template, a source, a kind of answer) whenever that costs no row. Deterministic (it depends
/// only on the lengths and their order), so the rows do not depend on the machine or on the
/// number of ranks that later train on them.
PackedRows pack_rows(const std::vector<PackItem>& items, std::uint32_t row_tokens);

/// One split's outputs and counts. Examples are kept (packed datasets are written once all
/// are known); `examples` counts them, `rows` the rows written.
struct RowWriter {
  TokenFileWriter tokens;
  MaskFileWriter mask;
  std::unique_ptr<DocFileWriter> docs;  // --pack only
  std::vector<PackItem> kept;            // --pack only: the examples, in input order
  std::uint64_t examples = 0, rows = 0, filled = 0, trainable = 0;
  RowWriter(const std::string& tok_path, const std::string& mask_path, const std::string& docs_path,
            std::int64_t vocab, std::uint32_t row)
      : tokens(tok_path, vocab), mask(mask_path, row) {
    if (!docs_path.empty()) docs = std::make_unique<DocFileWriter>(docs_path, row);
  }
};

/// Writes the packed rows of one split's kept examples (pack_rows' rows, in order), padding
/// each row after its last example with `pad` (mask 0, its own segment); returns the rule.
PackRule write_packed(RowWriter& w, std::uint32_t R, std::int32_t pad);

/// Writes one split's kept examples one per row, in input order, each padded with `pad`
/// (mask 0): the rows an unpacked prepare streams (the default's choice when nothing packs).
void write_one_per_row(RowWriter& w, std::uint32_t R, std::int32_t pad);

}  // namespace meshtrain::data
