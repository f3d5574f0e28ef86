// Bin packing for `prepare --pack`: shuffled first fit, or first-fit decreasing where it needs
// fewer rows (doc/data.md, "Packed rows", explains the choice).
#include "packing.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "data/hash.hpp"

namespace meshtrain::data {

const char* pack_rule_name(PackRule rule) {
  return rule == PackRule::ShuffledFirstFit ? "first fit in a shuffled order" : "first-fit decreasing";
}

std::vector<PackedRow> first_fit_rows(const std::vector<PackItem>& items, const std::vector<std::size_t>& order,
                                      std::uint32_t row_tokens) {
  MESHTRAIN_ASSERT(order.size() == items.size(), "first fit: an order of %zu for %zu items", order.size(),
                   items.size());
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

std::vector<PackedRow> pack_rows_decreasing(const std::vector<PackItem>& items, std::uint32_t row_tokens) {
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return items[a].ids.size() > items[b].ids.size(); });
  return first_fit_rows(items, order, row_tokens);
}

std::vector<PackedRow> pack_rows_shuffled(const std::vector<PackItem>& items, std::uint32_t row_tokens) {
  // A fixed key, not a prepare option: the rows stay a function of the examples alone.
  const std::uint64_t key = stream_key(0, HashStream::PackOrder);
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) keyed[i] = {counter_hash(key, i), i};
  std::sort(keyed.begin(), keyed.end());  // equal hashes (never seen) fall back to the index
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) order[i] = keyed[i].second;
  return first_fit_rows(items, order, row_tokens);
}

PackedRows pack_rows(const std::vector<PackItem>& items, std::uint32_t row_tokens) {
  PackedRows r{pack_rows_shuffled(items, row_tokens), PackRule::ShuffledFirstFit};
  std::vector<PackedRow> decreasing = pack_rows_decreasing(items, row_tokens);
  if (decreasing.size() < r.rows.size()) r = PackedRows{std::move(decreasing), PackRule::FirstFitDecreasing};
  return r;
}

PackRule write_packed(RowWriter& w, std::uint32_t R, std::int32_t pad) {
  const PackedRows packed = pack_rows(w.kept, R);
  const std::vector<PackedRow>& rows = packed.rows;
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
  return packed.rule;
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
