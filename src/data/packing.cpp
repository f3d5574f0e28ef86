// First-fit decreasing bin packing for `prepare --pack` (doc/data.md explains the choice).
#include "packing.hpp"

#include <algorithm>
#include <numeric>

#include "meshtrain/core/error.hpp"

namespace meshtrain::data {

std::vector<PackedRow> pack_rows(const std::vector<PackItem>& items, std::uint32_t row_tokens) {
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return items[a].ids.size() > items[b].ids.size(); });
  // free_[leaf]: free tokens of row leaf (rows not yet opened have a whole row free); inner
  // nodes hold the maximum of their children, so the first row with room is one descent.
  std::size_t leaves = 1;
  while (leaves < std::max<std::size_t>(items.size(), 1)) leaves *= 2;
  std::vector<std::uint32_t> tree(2 * leaves, row_tokens);
  std::vector<PackedRow> rows;
  for (std::size_t e : order) {
    const auto n = static_cast<std::uint32_t>(items[e].ids.size());
    MESHTRAIN_ASSERT(n >= 1 && n <= row_tokens && items[e].mask.size() == n, "pack item %zu: %u tokens, row %u", e, n,
                     row_tokens);
    std::size_t node = 1;
    while (node < leaves) node = tree[2 * node] >= n ? 2 * node : 2 * node + 1;
    const std::size_t row = node - leaves;  // n items never need more than n rows: always found
    if (row >= rows.size()) rows.resize(row + 1);
    rows[row].items.push_back(e);
    rows[row].used += n;
    tree[node] -= n;
    for (node /= 2; node >= 1; node /= 2) tree[node] = std::max(tree[2 * node], tree[2 * node + 1]);
  }
  return rows;
}

/// Writes the packed rows of one split's kept examples (pack_rows' order), padding each row
/// after its last example with `pad` (mask 0, its own segment).
void write_packed(RowWriter& w, std::uint32_t R, std::int32_t pad) {
  const std::vector<PackedRow> rows = pack_rows(w.kept, R);
  std::vector<std::int32_t> ids(R);
  std::vector<std::uint8_t> mask(R);
  std::vector<std::uint16_t> seg(R);
  for (const PackedRow& row : rows) {
    std::uint32_t at = 0;
    std::uint16_t id = 0;
    for (std::size_t e : row.items) {
      const PackItem& ex = w.kept[e];
      std::copy(ex.ids.begin(), ex.ids.end(), ids.begin() + at);
      std::copy(ex.mask.begin(), ex.mask.end(), mask.begin() + at);
      std::fill_n(seg.begin() + at, ex.ids.size(), id++);
      at += static_cast<std::uint32_t>(ex.ids.size());
    }
    std::fill(ids.begin() + at, ids.end(), pad);
    std::fill(mask.begin() + at, mask.end(), 0);
    std::fill(seg.begin() + at, seg.end(), id);
    w.tokens.append(ids.data(), R);
    w.mask.append(mask.data(), R);
    w.docs->append(seg.data(), R);
    ++w.rows;
  }
}

void write_one_per_row(RowWriter& w, std::uint32_t R, std::int32_t pad) {
  std::vector<std::int32_t> ids(R);
  std::vector<std::uint8_t> mask(R);
  for (const PackItem& ex : w.kept) {
    std::copy(ex.ids.begin(), ex.ids.end(), ids.begin());
    std::copy(ex.mask.begin(), ex.mask.end(), mask.begin());
    std::fill(ids.begin() + static_cast<std::ptrdiff_t>(ex.ids.size()), ids.end(), pad);
    std::fill(mask.begin() + static_cast<std::ptrdiff_t>(ex.ids.size()), mask.end(), 0);
    w.tokens.append(ids.data(), R);
    w.mask.append(mask.data(), R);
    ++w.rows;
  }
}

}  // namespace meshtrain::data
