// The quantized-base dequantization kernels (issue 32) against the codecs they decode:
// formats::nf4::dequantize and formats::int8_blocks::dequantize, bit for bit in float and
// equal to their bf16 rounding in bf16; shards, runs, padding blocks and every code. And the
// per-shard encoder of parallel/quantized_base against the whole-tensor codec.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "formats/int8_blocks.hpp"
#include "formats/nf4.hpp"
#include "kernel_test_utils.hpp"
#include "kernels/dequant.hpp"
#include "parallel/quantized_base.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;
namespace nf4 = meshtrain::formats::nf4;
namespace i8 = meshtrain::formats::int8_blocks;

namespace {

constexpr std::int64_t kB = nf4::kBlock;

/// A tensor of `blocks` blocks whose scale varies over four orders of magnitude from block
/// to block (so 8-bit scales and group maxima matter), with a block of zeros, a block that
/// is exactly every NF4 code times its absmax (each code present), and negative extremes.
std::vector<float> test_tensor(std::int64_t blocks, std::uint64_t seed) {
  const std::vector<double> g = random_normal(static_cast<std::size_t>(blocks * kB), seed);
  std::vector<float> x(g.size());
  for (std::int64_t b = 0; b < blocks; ++b) {
    const double scale = std::pow(10.0, -3.0 + 4.0 * ((b * 37) % 101) / 100.0);
    for (std::int64_t i = 0; i < kB; ++i) x[b * kB + i] = static_cast<float>(g[b * kB + i] * scale);
  }
  std::fill(x.begin() + 3 * kB, x.begin() + 4 * kB, 0.0f);
  for (int i = 0; i < kB; ++i) x[5 * kB + i] = nf4::kCodes[i % 16] * 0.75f;
  x[7 * kB] = -9.5f;
  return x;
}

/// The layout of `q` as the kernels read it, in `shards` equal shards of the segment:
/// per shard codes | scales. The segment is `pad` zero blocks, the tensor, `pad` zero blocks.
std::vector<std::uint8_t> nf4_payload(const nf4::Quantized& q, std::int64_t pad, int shards, std::int64_t& shard_numel) {
  const std::int64_t numel = q.n + 2 * pad * kB;
  shard_numel = numel / shards;
  const std::int64_t stride = parallel::payload_bytes(BaseQuant::Nf4, shard_numel);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(stride * shards), 0);
  for (std::int64_t j = pad * kB; j < pad * kB + q.n; j += 2) {
    const std::int64_t s = j / shard_numel, k0 = j % shard_numel;
    out[static_cast<std::size_t>(s * stride + k0 / 2)] = q.codes[static_cast<std::size_t>((j - pad * kB) / 2)];
  }
  for (std::int64_t b = 0; b < q.n / kB; ++b) {
    const std::int64_t j = (pad + b) * kB, s = j / shard_numel, k0 = j % shard_numel;
    out[static_cast<std::size_t>(s * stride + shard_numel / 2 + k0 / kB)] = q.scales[static_cast<std::size_t>(b)];
  }
  return out;
}

template <class T>
void check_nf4(int shards) {
  const std::int64_t blocks = 3 * nf4::kScaleGroup + 5, pad = 1;  // 4 groups, the last partial
  const std::int64_t numel_total = (blocks + 2 * pad) * kB;
  ASSERT_EQ(numel_total % (shards * kB), 0) << "shards of whole blocks";
  const std::vector<float> x = test_tensor(blocks, 11);
  const nf4::Quantized q = nf4::quantize(x.data(), static_cast<std::int64_t>(x.size()));
  std::set<int> codes;
  for (std::uint8_t c : q.codes) codes.insert(c >> 4), codes.insert(c & 15);
  ASSERT_EQ(codes.size(), 16u) << "every NF4 code must occur";
  std::vector<float> expect(x.size());
  nf4::dequantize(q, 0, q.n, expect.data());
  std::int64_t shard_numel = 0;
  const std::vector<std::uint8_t> payload = nf4_payload(q, pad, shards, shard_numel);
  // The tensor is cut into two runs (one starts mid-tensor, as a TP row slice would).
  const std::vector<k::QuantRun> runs = {{pad, 300, 0, 2}, {pad + 300, blocks - 300, 300, 2}};
  std::vector<float> table = {99.0f, 98.0f};  // the tensor's group maxima start at index 2
  table.insert(table.end(), q.scale_max.begin(), q.scale_max.end());
  auto d_pay = to_device(payload);
  auto d_runs = to_device(runs);
  auto d_table = to_device(table);
  Buffer<T> out(static_cast<std::size_t>(numel_total), MemCategory::Workspace);
  k::dequantize_nf4(d_pay.data(), static_cast<std::int64_t>(payload.size()) / shards, shard_numel, d_runs.data(),
                    static_cast<int>(runs.size()), d_table.data(), out.data(), numel_total);
  const std::vector<T> got = to_host(out);
  for (std::int64_t j = 0; j < numel_total; ++j) {
    const bool inside = j >= pad * kB && j < pad * kB + q.n;
    // Exact: the kernel evaluates the codec's expression (code value times the stored
    // absmax, in float), then one rounding to T.
    const float ref = inside ? expect[static_cast<std::size_t>(j - pad * kB)] : 0.0f;
    const T want = static_cast<T>(ref);
    ASSERT_EQ(std::memcmp(&got[static_cast<std::size_t>(j)], &want, sizeof(T)), 0) << "element " << j;
  }
}

template <class T>
void check_int8(int shards) {
  const std::int64_t blocks = 2 * shards * 7;
  const std::vector<float> x = test_tensor(blocks, 5);
  const i8::Quantized q = i8::quantize(x.data(), static_cast<std::int64_t>(x.size()));
  std::set<int> codes(q.codes.begin(), q.codes.end());
  ASSERT_TRUE(codes.count(127) && codes.count(-127) && codes.count(0));
  std::vector<float> expect(x.size());
  i8::dequantize(q, 0, q.n, expect.data());
  const std::int64_t shard_numel = q.n / shards, stride = parallel::payload_bytes(BaseQuant::Int8, shard_numel);
  std::vector<std::uint8_t> payload(static_cast<std::size_t>(stride * shards), 0);
  for (int s = 0; s < shards; ++s) {
    std::memcpy(payload.data() + s * stride, q.codes.data() + s * shard_numel, static_cast<std::size_t>(shard_numel));
    std::memcpy(payload.data() + s * stride + shard_numel, q.absmax.data() + s * shard_numel / kB,
                static_cast<std::size_t>(shard_numel / kB) * sizeof(float));
  }
  const std::vector<k::QuantRun> runs = {{0, blocks, 0, 0}};
  auto d_pay = to_device(payload);
  auto d_runs = to_device(runs);
  Buffer<T> out(static_cast<std::size_t>(q.n), MemCategory::Workspace);
  k::dequantize_int8(d_pay.data(), stride, shard_numel, d_runs.data(), 1, out.data(), q.n);
  const std::vector<T> got = to_host(out);
  for (std::int64_t j = 0; j < q.n; ++j) {
    const T want = static_cast<T>(expect[static_cast<std::size_t>(j)]);  // exact, as for NF4
    ASSERT_EQ(std::memcmp(&got[static_cast<std::size_t>(j)], &want, sizeof(T)), 0) << "element " << j;
  }
}

}  // namespace

TEST(KernelsDequant, Nf4FloatEqualsCodec) {
  check_nf4<float>(1);
  check_nf4<float>(5);  // 775 blocks: 5 shards of 155
}
TEST(KernelsDequant, Nf4Bf16IsCodecRounded) { check_nf4<bf16>(5); }
TEST(KernelsDequant, Int8FloatEqualsCodec) {
  check_int8<float>(1);
  check_int8<float>(2);
}
TEST(KernelsDequant, Int8Bf16IsCodecRounded) { check_int8<bf16>(2); }

// Shards encoded on their own, with the group maxima combined across them (what
// FsdpEngine::set_frozen does over the world), equal the whole-tensor codec byte for byte.
TEST(KernelsDequant, ShardEncoderEqualsWholeTensorCodec) {
  const std::int64_t blocks = 2 * nf4::kScaleGroup + 6, shards = 2;  // shard boundary inside group 0
  const std::vector<float> x = test_tensor(blocks, 3);
  const nf4::Quantized q = nf4::quantize(x.data(), static_cast<std::int64_t>(x.size()));
  parallel::QuantMap map;
  map.runs = {{0, blocks, 0, 0}};
  map.groups = static_cast<std::int64_t>(q.scale_max.size());
  const std::int64_t sn = blocks * kB / shards;
  std::vector<float> group_max(static_cast<std::size_t>(map.groups), 0.0f);
  for (int s = 0; s < shards; ++s) parallel::partial_group_max(map, x.data() + s * sn, s * sn, sn, group_max);
  ASSERT_EQ(group_max, q.scale_max);
  const i8::Quantized q8 = i8::quantize(x.data(), static_cast<std::int64_t>(x.size()));
  for (int s = 0; s < shards; ++s) {
    std::vector<std::uint8_t> p(static_cast<std::size_t>(parallel::payload_bytes(BaseQuant::Nf4, sn)));
    parallel::encode_shard(BaseQuant::Nf4, map, x.data() + s * sn, s * sn, sn, group_max, p.data());
    ASSERT_EQ(0, std::memcmp(p.data(), q.codes.data() + s * sn / 2, static_cast<std::size_t>(sn / 2))) << "shard " << s;
    ASSERT_EQ(0, std::memcmp(p.data() + sn / 2, q.scales.data() + s * sn / kB, static_cast<std::size_t>(sn / kB)));
    std::vector<std::uint8_t> p8(static_cast<std::size_t>(parallel::payload_bytes(BaseQuant::Int8, sn)));
    parallel::encode_shard(BaseQuant::Int8, map, x.data() + s * sn, s * sn, sn, group_max, p8.data());
    ASSERT_EQ(0, std::memcmp(p8.data(), q8.codes.data() + s * sn, static_cast<std::size_t>(sn)));
    ASSERT_EQ(0, std::memcmp(p8.data() + sn, q8.absmax.data() + s * sn / kB, static_cast<std::size_t>(sn / kB) * 4));
  }
}

// ---- parts of a segment: the kept-quantized outer unit's reads ------------------------
// A (rows x cols) matrix whose rows do not start on blocks (cols = 100), inside a segment of
// two shards with a zero block before and after it, its blocks in two runs; rectangles of it
// (vocabulary chunks, column chunks of the LM head) and gathered rows (the embedding lookup)
// equal the codec's dequantization of the whole tensor -- formats::nf4 / int8_blocks, and
// parallel::dequantized_tensor, the merge's view of it -- bit for bit (after one rounding to T).
namespace {

constexpr std::int64_t kRows = 700, kCols = 100, kPad = 1;

/// The segment: kPad zero blocks | the matrix, padded to a block | kPad zero blocks; its
/// quantized form as the kernels read it (payload of `shards` shards, runs, group maxima)
/// and the codec's values of the matrix (kRows * kCols).
struct MatrixSegment {
  std::vector<std::uint8_t> payload;
  std::int64_t stride = 0, shard_numel = 0, numel = 0;
  std::vector<k::QuantRun> runs;
  std::vector<float> table;
  std::vector<float> expect;
};

MatrixSegment matrix_segment(BaseQuant quant, int shards) {
  MatrixSegment m;
  const std::int64_t n = kRows * kCols, blocks = (n + kB - 1) / kB;
  std::vector<float> x = test_tensor(blocks, 23);
  x.resize(static_cast<std::size_t>(n));
  // The reference: the merge's view of the tensor (the codec, the tail padded to a block).
  model::ParamSpec spec;
  spec.name = "m";
  spec.shape = {kRows, kCols};
  spec.unit = 1;
  m.expect = x;
  parallel::dequantized_tensor(quant, true, spec, m.expect);
  std::vector<float> padded = x;
  padded.resize(static_cast<std::size_t>(blocks * kB), 0.0f);
  m.numel = (blocks + 2 * kPad) * kB;
  EXPECT_EQ(m.numel % (shards * kB), 0);
  m.runs = {{kPad, 300, 0, 1}, {kPad + 300, blocks - 300, 300, 1}};  // group maxima from index 1
  if (quant == BaseQuant::Nf4) {
    const nf4::Quantized q = nf4::quantize(padded.data(), static_cast<std::int64_t>(padded.size()));
    std::vector<float> codec(padded.size());
    nf4::dequantize(q, 0, q.n, codec.data());
    for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(codec[static_cast<std::size_t>(j)], m.expect[static_cast<std::size_t>(j)]);
    m.payload = nf4_payload(q, kPad, shards, m.shard_numel);
    m.stride = static_cast<std::int64_t>(m.payload.size()) / shards;
    m.table = {77.0f};
    m.table.insert(m.table.end(), q.scale_max.begin(), q.scale_max.end());
  } else {
    const i8::Quantized q = i8::quantize(padded.data(), static_cast<std::int64_t>(padded.size()));
    m.shard_numel = m.numel / shards;
    m.stride = parallel::payload_bytes(BaseQuant::Int8, m.shard_numel);
    m.payload.assign(static_cast<std::size_t>(m.stride * shards), 0);
    for (std::int64_t j = 0; j < q.n; ++j) {
      const std::int64_t e = kPad * kB + j, s = e / m.shard_numel;
      m.payload[static_cast<std::size_t>(s * m.stride + e % m.shard_numel)] = static_cast<std::uint8_t>(q.codes[static_cast<std::size_t>(j)]);
    }
    for (std::int64_t b = 0; b < q.n / kB; ++b) {
      const std::int64_t e = (kPad + b) * kB, s = e / m.shard_numel;
      std::memcpy(m.payload.data() + s * m.stride + m.shard_numel + (e % m.shard_numel) / kB * 4,
                  &q.absmax[static_cast<std::size_t>(b)], 4);
    }
    m.table = {77.0f};
  }
  return m;
}

template <class T>
void check_parts(BaseQuant quant, int shards) {
  const MatrixSegment m = matrix_segment(quant, shards);
  auto d_pay = to_device(m.payload);
  auto d_runs = to_device(m.runs);
  auto d_table = to_device(m.table);
  const k::QuantSegment seg{quant == BaseQuant::Nf4, d_pay.data(), m.stride, m.shard_numel, d_runs.data(),
                            static_cast<int>(m.runs.size()), d_table.data()};
  const std::int64_t offset = kPad * kB;
  const auto want = [&](std::int64_t r, std::int64_t c) {
    return static_cast<T>(m.expect[static_cast<std::size_t>(r * kCols + c)]);
  };
  // The whole segment as the block units read it: the same bits.
  Buffer<T> whole(static_cast<std::size_t>(m.numel), MemCategory::Workspace);
  if (seg.nf4)
    k::dequantize_nf4(d_pay.data(), m.stride, m.shard_numel, d_runs.data(), 2, d_table.data(), whole.data(), m.numel);
  else
    k::dequantize_int8(d_pay.data(), m.stride, m.shard_numel, d_runs.data(), 2, whole.data(), m.numel);
  const std::vector<T> all = to_host(whole);
  for (std::int64_t j = 0; j < kRows * kCols; ++j) {
    const T w = want(j / kCols, j % kCols);
    ASSERT_EQ(std::memcmp(&all[static_cast<std::size_t>(offset + j)], &w, sizeof(T)), 0) << "segment element " << j;
  }
  // Rectangles: vocabulary-row chunks, column chunks (the last ones ragged), one inside,
  // written with a row stride wider than the rectangle (the cells between stay untouched).
  struct Rect { std::int64_t row0, rows, col0, cols; };
  for (const Rect& rc : {Rect{0, kRows, 0, kCols}, Rect{64, 37, 0, kCols}, Rect{0, kRows, 96, 4},
                         Rect{0, kRows, 0, 1}, Rect{699, 1, 3, 97}, Rect{5, 11, 13, 29}}) {
    const std::int64_t ld = rc.cols + 3;
    std::vector<T> init(static_cast<std::size_t>(rc.rows * ld), static_cast<T>(-5.0f));
    auto out = to_device(init);
    k::dequantize_rect(seg, offset, kCols, rc.row0, rc.rows, rc.col0, rc.cols, out.data(), ld);
    const std::vector<T> got = to_host(out);
    for (std::int64_t r = 0; r < rc.rows; ++r)
      for (std::int64_t c = 0; c < ld; ++c) {
        const T w = c < rc.cols ? want(rc.row0 + r, rc.col0 + c) : static_cast<T>(-5.0f);
        ASSERT_EQ(std::memcmp(&got[static_cast<std::size_t>(r * ld + c)], &w, sizeof(T)), 0)
            << "rect (" << rc.row0 << "+" << rc.rows << ", " << rc.col0 << "+" << rc.cols << ") at " << r << ", " << c;
      }
  }
  // Gathered rows of a vocabulary slice [100, 600): ids outside it give zero rows; repeats.
  const std::vector<std::int32_t> ids = {100, 599, 99, 600, 345, 345, 0, 120, 698, 501};
  auto d_ids = to_device(ids);
  const std::int64_t start = 100, count = 500;
  Buffer<T> rows(ids.size() * kCols, MemCategory::Workspace);
  k::dequantize_gather_rows(seg, offset + start * kCols, kCols, d_ids.data(), static_cast<int>(ids.size()), start,
                            count, rows.data());
  const std::vector<T> got = to_host(rows);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::int64_t c = 0; c < kCols; ++c) {
      const bool in = ids[i] >= start && ids[i] < start + count;
      const T w = in ? want(ids[i], c) : static_cast<T>(0.0f);
      ASSERT_EQ(std::memcmp(&got[i * kCols + static_cast<std::size_t>(c)], &w, sizeof(T)), 0) << "id " << ids[i] << " column " << c;
    }
}

}  // namespace

TEST(KernelsDequant, Nf4PartsEqualCodec) {
  check_parts<float>(BaseQuant::Nf4, 1);
  check_parts<float>(BaseQuant::Nf4, 2);
  check_parts<bf16>(BaseQuant::Nf4, 2);
}
TEST(KernelsDequant, Int8PartsEqualCodec) {
  check_parts<float>(BaseQuant::Int8, 2);
  check_parts<bf16>(BaseQuant::Int8, 1);
}
