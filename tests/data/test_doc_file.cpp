// Document-boundary files of packed datasets (train.docs): round trip, document starts,
// one test per corrupt-file case; the packer's rules (shuffled first fit, first-fit decreasing).
#include <gtest/gtest.h>

#include <vector>

#include "../../src/data/packing.hpp"
#include "data_test_util.hpp"
#include "core/error.hpp"
#include "data/doc_file.hpp"

using namespace meshtrain;
using namespace meshtrain::data;
using test::TempDir;

namespace {

// Two rows of 6: documents [3, 2, pad 1] and [6].
const std::vector<std::uint16_t> kIds = {0, 0, 0, 1, 1, 2, 0, 0, 0, 0, 0, 0};

std::string write_docs(const std::string& path, const std::vector<std::uint16_t>& ids, std::uint32_t row = 6) {
  DocFileWriter w(path, row);
  w.append(ids.data(), ids.size());
  w.close();
  return path;
}

template <class F>
void expect_error(const std::string& path, const std::string& what, F&& f) {
  try {
    f();
    FAIL() << "no error for " << path;
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
  }
}

void expect_open_rejected(const std::string& path, const std::string& what) {
  expect_error(path, what, [&] { DocFile f(path); });
}

}  // namespace

TEST(DocFile, RoundTripAndDocumentStarts) {
  TempDir dir("docs");
  DocFile f(write_docs(dir / "train.docs", kIds));
  EXPECT_EQ(f.size(), kIds.size());
  EXPECT_EQ(f.row_tokens(), 6u);
  std::vector<std::uint16_t> row(6);
  f.read_row(0, 6, row.data());
  EXPECT_EQ(row, std::vector<std::uint16_t>(kIds.begin(), kIds.begin() + 6));
  std::vector<std::int32_t> starts(6);
  doc_starts_from_segments(row.data(), 6, starts.data());
  EXPECT_EQ(starts, (std::vector<std::int32_t>{0, 0, 0, 3, 3, 5}));
  f.read_row(6, 6, row.data());
  doc_starts_from_segments(row.data(), 6, starts.data());
  EXPECT_EQ(starts, std::vector<std::int32_t>(6, 0));
  // Reads must stay within one row.
  expect_error(f.path(), "not within one of its rows", [&] { f.read_row(3, 6, row.data()); });
}

TEST(DocFile, TruncatedWrongHeaderAndBadIds) {
  TempDir dir("docs");
  const std::string good = test::read_file(write_docs(dir / "good.docs", kIds));
  auto variant = [&](const std::string& name, std::string bytes) {
    const std::string p = dir / name;
    test::write_file(p, bytes);
    return p;
  };
  expect_open_rejected(variant("short.docs", good.substr(0, 20)), "shorter than its 64-byte header");
  expect_open_rejected(variant("trunc.docs", good.substr(0, good.size() - 2)), "size does not match");
  std::string magic = good;
  magic[3] = 'X';
  expect_open_rejected(variant("magic.docs", magic), "does not start with 'MTLDOCS1'");
  std::string version = good;
  version[8] = 2;
  expect_open_rejected(variant("version.docs", version), "version is not 1");
  std::string reserved = good;
  reserved[40] = 1;
  expect_open_rejected(variant("reserved.docs", reserved), "header bytes 24..63 are not zero");
  std::string row = good;
  row[12] = 5;  // rows of 5: 12 ids are not whole rows
  expect_open_rejected(variant("row.docs", row), "not a multiple of its row length");

  // Ids that do not start at 0, decrease, or jump: refused when the row is read.
  std::vector<std::uint16_t> out(6);
  for (const auto& [name, ids, what] :
       {std::tuple{"start.docs", std::vector<std::uint16_t>{1, 1, 1, 1, 1, 1}, "not 0"},
        std::tuple{"down.docs", std::vector<std::uint16_t>{0, 1, 1, 0, 0, 0}, "decreasing"},
        std::tuple{"jump.docs", std::vector<std::uint16_t>{0, 0, 2, 2, 2, 2}, "a jump of more than 1"}}) {
    DocFile f(write_docs(dir / name, ids));
    expect_error(f.path(), what, [&] { f.read_row(0, 6, out.data()); });
  }
}

namespace {

std::vector<PackItem> items_of(const std::vector<int>& lengths) {
  std::vector<PackItem> items;
  for (int n : lengths)
    items.push_back(PackItem{std::vector<std::int32_t>(static_cast<std::size_t>(n), 1),
                             std::vector<std::uint8_t>(static_cast<std::size_t>(n), 1)});
  return items;
}

}  // namespace

TEST(Packing, FirstFitDecreasing) {
  // Lengths 3, 7, 5, 5, 2, 8 into rows of 10: sorted 8, 7, 5, 5, 3, 2 (ties in input order:
  // item 2 before 3) -> row 0 {8, 2}, row 1 {7, 3}, row 2 {5, 5}.
  const std::vector<PackItem> items = items_of({3, 7, 5, 5, 2, 8});
  const auto rows = pack_rows_decreasing(items, 10);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].items, (std::vector<std::size_t>{5, 4}));
  EXPECT_EQ(rows[1].items, (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(rows[2].items, (std::vector<std::size_t>{2, 3}));
  for (const auto& r : rows) EXPECT_EQ(r.used, 10u);
  // Deterministic: the same lengths give the same rows.
  const auto again = pack_rows_decreasing(items, 10);
  for (std::size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(again[i].items, rows[i].items);
  // The shuffled first fit needs a fourth row here, so prepare's rule takes these rows.
  EXPECT_GT(pack_rows_shuffled(items, 10).size(), rows.size());
  const PackedRows chosen = pack_rows(items, 10);
  EXPECT_EQ(chosen.rule, PackRule::FirstFitDecreasing);
  ASSERT_EQ(chosen.rows.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(chosen.rows[i].items, rows[i].items);
}

TEST(Packing, ShuffledFirstFitMixesLengths) {
  // 16 items of 5 tokens, then 16 of 4, rows of 10: any packing needs 16 rows (two items a
  // row), but first-fit decreasing pairs equal lengths ({5, 5} x 8, then {4, 4} x 8): on real
  // data, examples of one template or source together. The shuffled first fit needs no more
  // rows, so prepare takes it, and its rows mix the two lengths.
  std::vector<int> lengths(16, 5);
  lengths.resize(32, 4);
  const std::vector<PackItem> items = items_of(lengths);
  const auto decreasing = pack_rows_decreasing(items, 10);
  ASSERT_EQ(decreasing.size(), 16u);
  for (const auto& r : decreasing) EXPECT_EQ(items[r.items.front()].ids.size(), items[r.items.back()].ids.size());
  const PackedRows chosen = pack_rows(items, 10);
  EXPECT_EQ(chosen.rule, PackRule::ShuffledFirstFit);
  ASSERT_EQ(chosen.rows.size(), 16u);
  std::vector<int> seen(items.size(), 0);
  int mixed = 0;
  for (const auto& r : chosen.rows) {
    std::uint32_t used = 0;
    for (std::size_t e : r.items) {
      ++seen[e];
      used += static_cast<std::uint32_t>(items[e].ids.size());
    }
    EXPECT_EQ(r.used, used);
    EXPECT_LE(r.used, 10u);
    mixed += items[r.items.front()].ids.size() != items[r.items.back()].ids.size();
  }
  for (int n : seen) EXPECT_EQ(n, 1);
  EXPECT_GE(mixed, 4) << "the shuffled rows still pair equal lengths";
  // Deterministic: the order is a function of the item index alone (no clock, no rank).
  const PackedRows again = pack_rows(items, 10);
  for (std::size_t i = 0; i < chosen.rows.size(); ++i) EXPECT_EQ(again.rows[i].items, chosen.rows[i].items);
}
