// Training/eval windows and random tokens: determinism, independence from the number of
// ranks, and window contents against the source.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "data/sampler.hpp"
#include "data/token_source.hpp"
#include "data_test_util.hpp"

using namespace meshtrain;
using namespace meshtrain::data;

namespace {

// Token i == i: a window's contents reveal where it starts.
class IotaSource final : public TokenSource {
 public:
  explicit IotaSource(std::uint64_t n) : n_(n) {}
  std::uint64_t size() const override { return n_; }
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(n_); }
  void read(std::uint64_t offset, int len, std::int32_t* out) const override {
    check_read_range(offset, len, n_, description());
    for (int i = 0; i < len; ++i) out[i] = static_cast<std::int32_t>(offset + static_cast<std::uint64_t>(i));
  }
  std::string description() const override { return "iota"; }

 private:
  std::uint64_t n_;
};

using Row = std::vector<std::int32_t>;

// Rows of `n` windows from `first` (inputs and targets interleaved per window).
std::vector<Row> windows(const Sampler& s, std::uint64_t first, int n) {
  const int T = s.seq_len();
  std::vector<std::int32_t> in(static_cast<std::size_t>(n * T)), tg(in.size());
  s.fill(first, n, in.data(), tg.data());
  std::vector<Row> rows;
  for (int j = 0; j < n; ++j) {
    Row r(in.begin() + j * T, in.begin() + (j + 1) * T);
    r.insert(r.end(), tg.begin() + j * T, tg.begin() + (j + 1) * T);
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

TEST(Sampler, WindowContentsMatchTheSource) {
  const int T = 16;
  auto src = std::make_shared<IotaSource>(1000);
  Sampler s(src, T, 7);
  const std::vector<Row> rows = windows(s, 0, 64);
  for (int j = 0; j < 64; ++j) {
    const std::uint64_t start = s.window_start(static_cast<std::uint64_t>(j));
    ASSERT_LT(start, 1000u - T);  // the last target is token start + T <= size - 1
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(rows[j][t], static_cast<std::int32_t>(start) + t);          // inputs
      EXPECT_EQ(rows[j][T + t], static_cast<std::int32_t>(start) + t + 1);  // targets
    }
  }
}

TEST(Sampler, DeterministicAndCounterBased) {
  auto src = std::make_shared<IotaSource>(5000);
  Sampler a(src, 8, 1234), b(src, 8, 1234), c(src, 8, 1235);
  EXPECT_EQ(windows(a, 0, 32), windows(b, 0, 32));
  EXPECT_NE(windows(a, 0, 32), windows(c, 0, 32));
  // Window w does not depend on which windows were produced before it.
  const std::vector<Row> all = windows(a, 0, 32);
  const std::vector<Row> tail = windows(b, 20, 12);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), all.begin() + 20));
}

TEST(Sampler, UnionOverRanksIsIndependentOfRankCount) {
  auto src = std::make_shared<IotaSource>(100000);
  Sampler s(src, 12, 99);
  const int global_batch = 8;  // windows per optimizer step
  for (const int accum : {1, 2}) {
    std::map<int, std::vector<Row>> taken;  // dp_size -> windows of 3 steps, sorted
    for (const int D : {1, 2, 4}) {
      const int micro = global_batch / (accum * D);
      std::uint64_t cursor = 17;  // as if resumed from a checkpoint
      for (int step = 0; step < 3; ++step) {
        for (int d = 0; d < D; ++d)
          for (int a = 0; a < accum; ++a) {
            const std::vector<Row> r = windows(s, rank_first_window(cursor, a, micro, D, d), micro);
            taken[D].insert(taken[D].end(), r.begin(), r.end());
          }
        cursor += static_cast<std::uint64_t>(global_batch);
      }
      std::sort(taken[D].begin(), taken[D].end());
      ASSERT_EQ(taken[D].size(), 3u * global_batch);
    }
    EXPECT_EQ(taken[1], taken[2]) << "accum " << accum;
    EXPECT_EQ(taken[1], taken[4]) << "accum " << accum;
    // ... and they are exactly windows cursor .. cursor + 3 * global_batch - 1.
    std::vector<Row> expect = windows(s, 17, 3 * global_batch);
    std::sort(expect.begin(), expect.end());
    EXPECT_EQ(taken[1], expect);
  }
}

TEST(Sampler, RankFirstWindowLayout) {
  // cursor + a * (micro * D) + d * micro
  EXPECT_EQ(rank_first_window(100, 0, 4, 2, 0), 100u);
  EXPECT_EQ(rank_first_window(100, 0, 4, 2, 1), 104u);
  EXPECT_EQ(rank_first_window(100, 1, 4, 2, 0), 108u);
  EXPECT_EQ(rank_first_window(100, 3, 4, 2, 1), 128u);
}

TEST(Sampler, StartsCoverEveryValidOffsetUniformly) {
  const int T = 4;
  auto src = std::make_shared<IotaSource>(T + 10);  // 10 valid starts
  Sampler s(src, T, 5);
  std::vector<int> hits(10, 0);
  const int n = 20000;
  for (int w = 0; w < n; ++w) ++hits[static_cast<std::size_t>(s.window_start(static_cast<std::uint64_t>(w)))];
  // Binomial(20000, 0.1): sd = 42; 6 sd bounds.
  for (int h : hits) {
    EXPECT_GT(h, 2000 - 260);
    EXPECT_LT(h, 2000 + 260);
  }
}

TEST(Sampler, SmallestSourceHasOneWindow) {
  auto src = std::make_shared<IotaSource>(9);
  Sampler s(src, 8, 0);
  EXPECT_EQ(s.window_start(123456789), 0u);
  std::vector<std::int32_t> in(8), tg(8);
  s.fill(42, 1, in.data(), tg.data());
  EXPECT_EQ(tg.back(), 8);
}

TEST(Sampler, TooSmallSourceIsAUserError) {
  auto src = std::make_shared<IotaSource>(8);
  EXPECT_FALSE(has_window(*src, 8));
  try {
    Sampler s(src, 8, 0);
    FAIL();
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("has 8 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("9 tokens"), std::string::npos) << msg;
  }
  EXPECT_THROW(EvalSampler(src, 8), UserError);
  EXPECT_THROW(Sampler(std::make_shared<IotaSource>(100), 0, 0), UserError);
}

TEST(EvalSampler, WindowsTileWithoutOverlapThenWrap) {
  const int T = 10;
  auto src = std::make_shared<IotaSource>(105);
  EvalSampler e(src, T);
  EXPECT_EQ(e.windows_per_pass(), 10u);  // (105 - 1) / 10
  for (std::uint64_t i = 0; i < e.windows_per_pass(); ++i) EXPECT_EQ(e.window_start(i), i * T);
  EXPECT_EQ(e.window_start(10), 100u % 95u);  // (i * T) % (size - T)
  std::vector<std::int32_t> in(3 * T), tg(3 * T);
  e.fill(2, 3, in.data(), tg.data());
  for (int j = 0; j < 3; ++j)
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(in[j * T + t], (2 + j) * T + t);
      EXPECT_EQ(tg[j * T + t], (2 + j) * T + t + 1);
    }
  // The last window of a pass ends inside the source.
  const std::uint64_t last = e.window_start(e.windows_per_pass() - 1);
  EXPECT_LE(last + T + 1, src->size());
  // A huge index does not overflow.
  EXPECT_LT(e.window_start(~std::uint64_t{0}), 95u);
}

TEST(RandomTokens, DeterministicInRangeAndRandomAccess) {
  RandomTokens a(50304, 42), b(50304, 42), c(50304, 43);
  EXPECT_EQ(a.size(), std::uint64_t{1} << 62);
  EXPECT_EQ(a.vocab_size(), 50304);
  std::vector<std::int32_t> x(4096), y(4096), z(4096), part(100);
  a.read(1000, 4096, x.data());
  b.read(1000, 4096, y.data());
  c.read(1000, 4096, z.data());
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  b.read(1500, 100, part.data());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), x.begin() + 500));
  double mean = 0;
  for (const std::int32_t t : x) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 50304);
    mean += t / 4096.0;
  }
  EXPECT_NEAR(mean, 50303 / 2.0, 50304 * 0.03);  // sd of the mean ~ 0.0045 * vocab
  a.read(a.size() - 4, 4, x.data());
  std::int32_t one;
  EXPECT_THROW(a.read(a.size(), 1, &one), std::out_of_range);
  EXPECT_THROW(RandomTokens(0, 1), UserError);
}

TEST(RandomTokens, FeedsTheSamplerAtAnyCursor) {
  auto src = std::make_shared<RandomTokens>(1000, 3);
  Sampler s(src, 32, 3);
  std::vector<std::int32_t> in(64), tg(64), ref(33);
  const std::uint64_t w = std::uint64_t{1} << 60;
  s.fill(w, 2, in.data(), tg.data());
  src->read(s.window_start(w), 33, ref.data());
  EXPECT_TRUE(std::equal(in.begin(), in.begin() + 32, ref.begin()));
  EXPECT_TRUE(std::equal(tg.begin(), tg.begin() + 32, ref.begin() + 1));
}

// Instruction/chat data: a loss mask makes every window a whole row (one example), in the
// same rank-independent order, with -1 for every target whose mask byte is 0.
TEST(SamplerRows, WindowsAreWholeRowsWithMaskedTargets) {
  constexpr int kSeq = 4, kRow = kSeq + 1, kRows = 6;
  test::TempDir dir("sampler_rows");
  std::vector<std::uint8_t> mask(kRows * kRow);
  for (int i = 0; i < kRows * kRow; ++i) mask[i] = (i % kRow) >= 2 && (i % 3) != 0;  // a varied pattern
  {
    MaskFileWriter w(dir / "m.mask", kRow);
    w.append(mask.data(), mask.size());
    w.close();
  }
  auto m = std::make_shared<MaskFile>(dir / "m.mask");
  ASSERT_EQ(m->size(), static_cast<std::uint64_t>(kRows * kRow));
  auto src = std::make_shared<IotaSource>(kRows * kRow);
  const Sampler s(src, kSeq, 7, m);
  std::vector<std::int32_t> in(8 * kSeq), tgt(8 * kSeq);
  s.fill(0, 8, in.data(), tgt.data());
  std::map<std::uint64_t, int> seen;
  for (int w = 0; w < 8; ++w) {
    const std::uint64_t start = s.window_start(static_cast<std::uint64_t>(w));
    ASSERT_EQ(start % kRow, 0u) << "window " << w << " does not start a row";
    ++seen[start];
    for (int t = 0; t < kSeq; ++t) {
      EXPECT_EQ(in[w * kSeq + t], static_cast<std::int32_t>(start + t));
      const std::uint64_t target_pos = start + 1 + t;
      EXPECT_EQ(tgt[w * kSeq + t], mask[target_pos] ? static_cast<std::int32_t>(target_pos) : -1)
          << "window " << w << " position " << t;
    }
  }
  EXPECT_GT(seen.size(), 1u);  // not one row over and over
  // Evaluation: row i % rows, each example once per pass.
  const EvalSampler e(src, kSeq, m);
  EXPECT_EQ(e.windows_per_pass(), static_cast<std::uint64_t>(kRows));
  for (std::uint64_t i = 0; i < 2 * kRows; ++i) EXPECT_EQ(e.window_start(i), (i % kRows) * kRow);
  // train.seq_len must be the dataset's.
  try {
    Sampler(src, kSeq + 1, 7, m);
    FAIL() << "a seq_len other than the rows' was accepted";
  } catch (const UserError& err) {
    EXPECT_NE(std::string(err.what()).find("set train.seq_len=4"), std::string::npos) << err.what();
  }
  EXPECT_THROW(EvalSampler(src, kSeq - 1, m), UserError);
}

TEST(SamplerRows, DamagedMaskFilesAreRefused) {
  test::TempDir dir("mask_damage");
  {
    MaskFileWriter w(dir / "ok.mask", 3);
    const std::uint8_t bytes[6] = {0, 1, 1, 0, 0, 2};  // a 2 is caught when read
    w.append(bytes, 6);
    w.close();
  }
  const std::string good = test::read_file(dir / "ok.mask");
  ASSERT_EQ(good.size(), 64u + 6u);
  const MaskFile m(dir / "ok.mask");
  std::uint8_t out[6];
  m.read(0, 3, out);
  EXPECT_EQ(out[2], 1);
  EXPECT_THROW(m.read(3, 3, out), UserError);  // the byte 2
  EXPECT_THROW(m.read(4, 3, out), UserError);  // past the end
  test::write_file(dir / "short.mask", good.substr(0, 66));
  EXPECT_THROW(MaskFile(dir / "short.mask"), UserError);
  test::write_file(dir / "magic.mask", "X" + good.substr(1));
  EXPECT_THROW(MaskFile(dir / "magic.mask"), UserError);
  std::string odd = good;
  odd[12] = 4;  // row length 4 does not divide 6
  test::write_file(dir / "odd.mask", odd);
  EXPECT_THROW(MaskFile(dir / "odd.mask"), UserError);
}

TEST(SamplerRows, PackedRowsDropCrossingTargetsAndGiveDocumentStarts) {
  // Rows of 7 (seq_len 6): row 0 = documents [0,3) [3,5) + padding [5,7); row 1 = [0,2) [2,7).
  constexpr int kSeq = 6, kRow = kSeq + 1;
  test::TempDir dir("sampler_docs");
  const std::vector<std::uint8_t> mask = {1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1};
  const std::vector<std::uint16_t> seg = {0, 0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1, 1};
  {
    MaskFileWriter w(dir / "m.mask", kRow);
    w.append(mask.data(), mask.size());
    w.close();
    DocFileWriter d(dir / "m.docs", kRow);
    d.append(seg.data(), seg.size());
    d.close();
  }
  auto src = std::make_shared<IotaSource>(2 * kRow);
  EvalSampler e(src, kSeq, std::make_shared<MaskFile>(dir / "m.mask"));
  DocumentMask dm;
  dm.docs = std::make_shared<DocFile>(dir / "m.docs");
  e.set_document_mask(dm);
  EXPECT_TRUE(e.document_masked());
  std::vector<std::int32_t> in(2 * kSeq), tgt(2 * kSeq), doc(2 * kSeq);
  e.fill(0, 2, in.data(), tgt.data(), doc.data());
  // Row 0: position 2 -> 3 crosses into document 1; 4 -> 5 into the padding (mask 0 anyway).
  EXPECT_EQ(tgt, (std::vector<std::int32_t>{1, 2, -1, 4, -1, -1, 8, -1, 10, 11, 12, 13}));
  EXPECT_EQ(doc, (std::vector<std::int32_t>{0, 0, 0, 3, 3, 5, 0, 0, 2, 2, 2, 2}));
  // Without doc_start the targets are the same.
  std::vector<std::int32_t> tgt2(2 * kSeq);
  e.fill(0, 2, in.data(), tgt2.data());
  EXPECT_EQ(tgt2, tgt);
  // Segment ids must match the rows.
  DocumentMask wrong;
  wrong.docs = dm.docs;
  EXPECT_THROW(EvalSampler(std::make_shared<IotaSource>(3 * kRow), kSeq).set_document_mask(wrong), UserError);
}

TEST(Sampler, TextDocumentMaskSplitsAtEndOfText) {
  // Token i == i; eot = 3: documents end with token 3 and the next starts at 4.
  auto src = std::make_shared<IotaSource>(20);
  EvalSampler e(src, 6);
  DocumentMask dm;
  dm.eot = 3;
  e.set_document_mask(dm);
  std::vector<std::int32_t> in(6), tgt(6), doc(6);
  e.fill(0, 1, in.data(), tgt.data(), doc.data());  // window [0, 6)
  EXPECT_EQ(tgt, (std::vector<std::int32_t>{1, 2, 3, -1, 5, 6}));  // 3 -> 4 crosses: not counted
  EXPECT_EQ(doc, (std::vector<std::int32_t>{0, 0, 0, 0, 4, 4}));
}

TEST(SamplerRows, PreferencePairsStayWholeInEveryRanksMicroBatch) {
  // 10 rows = 5 pairs (rows 2i, 2i + 1). With an even micro_batch every rank's micro-batch is
  // whole pairs at any dp size: window 2k is a chosen row (even), 2k + 1 the next row.
  constexpr int kSeq = 3, kRow = kSeq + 1, kRows = 10;
  test::TempDir dir("sampler_pairs");
  {
    const std::vector<std::uint8_t> mask(kRows * kRow, 1);
    MaskFileWriter w(dir / "m.mask", kRow);
    w.append(mask.data(), mask.size());
    w.close();
  }
  auto src = std::make_shared<IotaSource>(kRows * kRow);
  Sampler s(src, kSeq, 11, std::make_shared<MaskFile>(dir / "m.mask"));
  const Sampler plain = s;
  s.set_pairs();
  EXPECT_TRUE(s.pairs());
  std::map<std::uint64_t, int> pairs_seen;
  for (const int dp : {1, 2, 4})
    for (const int micro : {2, 4})
      for (std::uint64_t cursor = 0; cursor < 64; cursor += static_cast<std::uint64_t>(2 * micro * dp))
        for (int a = 0; a < 2; ++a)
          for (int d = 0; d < dp; ++d) {
            const std::uint64_t first = rank_first_window(cursor, a, micro, dp, d);
            for (int j = 0; j < micro; j += 2) {
              const std::uint64_t chosen = s.window_start(first + static_cast<std::uint64_t>(j)) / kRow;
              const std::uint64_t rejected = s.window_start(first + static_cast<std::uint64_t>(j) + 1) / kRow;
              ASSERT_EQ(chosen % 2, 0u) << "dp " << dp << " micro " << micro << ": window " << first + j
                                        << " is not a chosen row";
              ASSERT_EQ(rejected, chosen + 1) << "the pair of row " << chosen << " is split";
              ++pairs_seen[chosen / 2];
            }
          }
  EXPECT_EQ(pairs_seen.size(), 5u);  // every pair is drawn, not one over and over
  // Without set_pairs the rows are drawn one by one: pairs get split.
  bool split = false;
  for (std::uint64_t k = 0; k < 16 && !split; ++k)
    split = plain.window_start(2 * k + 1) / kRow != plain.window_start(2 * k) / kRow + 1;
  EXPECT_TRUE(split);
  // An odd number of rows, or a token stream, holds no pairs.
  {
    const std::vector<std::uint8_t> mask(3 * kRow, 1);
    MaskFileWriter w(dir / "odd.mask", kRow);
    w.append(mask.data(), mask.size());
    w.close();
  }
  Sampler odd(std::make_shared<IotaSource>(3 * kRow), kSeq, 11, std::make_shared<MaskFile>(dir / "odd.mask"));
  EXPECT_THROW(odd.set_pairs(), UserError);
  Sampler stream(src, kSeq, 11);
  EXPECT_THROW(stream.set_pairs(), UserError);
}
