#pragma once
// Bin packing of examples into rows (prepare --pack). Private to src/data.

#include <cstddef>
#include <cstdint>
#include <vector>

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

/// First-fit decreasing: items by length, longest first (ties: input order), each into the
/// first row (lowest index) with room for it, a new row when none has. Deterministic (it
/// depends only on the lengths and their order), so the rows do not depend on the machine
/// or on the number of ranks that later train on them. O(n log n) with a max-tree over
/// the rows' free space.
std::vector<PackedRow> pack_rows(const std::vector<PackItem>& items, std::uint32_t row_tokens);

}  // namespace meshtrain::data
