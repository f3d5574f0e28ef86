// The quantized-base dequantization kernels (issue 32) against the codecs they decode:
// formats::nf4::dequantize and formats::int8_blocks::dequantize, bit for bit in float and
// equal to their bf16 rounding in bf16; shards, runs, padding blocks and every code. And the
// per-shard encoder of parallel/quantized_base against the whole-tensor codec.
// model.base_quant=gguf: kernels::dequantize_gguf of random blocks of every type it decodes
// (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K; F32, F16, BF16), valid fp16 scales, against
// formats::gguf_dequantize (itself bitwise gguf.quants.dequantize: tests/checkpoint/
// gguf_dequant.sh, which also runs this kernel on the gguf package's tensors and SmolLM2's);
// and parallel/gguf_base's shards of a Llama's frozen units (K-quant blocks straddling
// shard boundaries, tensor-parallel slices, absent vocabulary rows) gathered and
// dequantized into exactly the file's values, and its refusal of a slice that splits a block.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>

#include "core/error.hpp"
#include "formats/gguf_dequant.hpp"
#include "formats/int8_blocks.hpp"
#include "formats/nf4.hpp"
#include "kernel_test_utils.hpp"
#include "kernels/dequant.hpp"
#include "kernels/dequant_gguf.hpp"
#include "model/layout.hpp"
#include "model/param_spec.hpp"
#include "parallel/gguf_base.hpp"
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
  const k::QuantSegment seg{quant == BaseQuant::Nf4 ? k::QuantFormat::Nf4 : k::QuantFormat::Int8, d_pay.data(), m.stride, m.shard_numel, d_runs.data(),
                            static_cast<int>(m.runs.size()), d_table.data()};
  const std::int64_t offset = kPad * kB;
  const auto want = [&](std::int64_t r, std::int64_t c) {
    return static_cast<T>(m.expect[static_cast<std::size_t>(r * kCols + c)]);
  };
  // The whole segment as the block units read it: the same bits.
  Buffer<T> whole(static_cast<std::size_t>(m.numel), MemCategory::Workspace);
  if (seg.format == k::QuantFormat::Nf4)
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

// ---- model.base_quant=gguf ------------------------------------------------------------------

namespace {

using formats::GgmlType;

std::uint32_t id(GgmlType t) { return static_cast<std::uint32_t>(t); }
const formats::GgmlTypeTraits& traits_of(GgmlType t) { return *formats::ggml_type_traits(id(t)); }

/// A random finite IEEE half (every exponent but the all-ones one: zeros and subnormals too).
std::uint16_t finite_half(std::mt19937_64& gen) {
  std::uint16_t h;
  do h = static_cast<std::uint16_t>(gen()); while ((h & 0x7C00u) == 0x7C00u);
  return h;
}

void put16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v & 0xFF);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}

/// `n_blocks` random blocks of `type` (n_blocks elements for the float types) whose scales
/// (and float values) are finite: random bytes, then the f16 fields set to finite halves.
std::vector<std::uint8_t> random_blocks(GgmlType type, std::int64_t n_blocks, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  const formats::GgmlTypeTraits& tr = traits_of(type);
  std::vector<std::uint8_t> b(static_cast<std::size_t>(n_blocks * tr.block_bytes));
  for (auto& x : b) x = static_cast<std::uint8_t>(gen());
  for (std::int64_t k = 0; k < n_blocks; ++k) {
    std::uint8_t* blk = b.data() + k * tr.block_bytes;
    switch (type) {
      case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::F16: put16(blk, finite_half(gen)); break;
      case GgmlType::Q4_1: case GgmlType::Q4_K: put16(blk, finite_half(gen)); put16(blk + 2, finite_half(gen)); break;
      case GgmlType::Q6_K: put16(blk + 208, finite_half(gen)); break;
      case GgmlType::BF16: blk[1] = static_cast<std::uint8_t>(blk[1] & 0xBF); break;  // exponent not all ones
      case GgmlType::F32: blk[3] = static_cast<std::uint8_t>(blk[3] & 0xBF); break;
      default: break;
    }
  }
  return b;
}

/// formats::gguf_dequantize of element i of the blocks `b` of `type`.
float reference_value(GgmlType type, const std::uint8_t* b, std::int64_t i) {
  const formats::GgmlTypeTraits& tr = traits_of(type);
  const std::int64_t blk = i / tr.block_elements;
  float v;
  formats::gguf_dequantize(type, reinterpret_cast<const std::byte*>(b) + blk * tr.block_bytes,
                           i - blk * tr.block_elements, 1, &v);
  return v;
}

const GgmlType kGgufTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K,
                               GgmlType::Q6_K, GgmlType::F32,  GgmlType::F16,  GgmlType::BF16};

/// The kernel on `type`'s random blocks laid out as a zero run, then the blocks split over
/// two shards of a payload (stride larger than either), equals the reference bit for bit --
/// the whole segment, and the elements [first, last) of a part of its groups.
template <class T>
void check_gguf_type(GgmlType type) {
  const formats::GgmlTypeTraits& tr = traits_of(type);
  // 7 blocks of the quantized types; 229 elements of the float ones (a partial last group).
  const std::int64_t blocks = tr.block_elements > 1 ? 7 : 229, numel = blocks * tr.block_elements, zeros = 40;
  const std::vector<std::uint8_t> bytes = random_blocks(type, blocks, 17 + id(type));
  const std::int64_t split = blocks / 2, bb = tr.block_bytes;
  const std::int64_t stride = (blocks - split) * bb + 24;  // the second shard holds more
  std::vector<std::uint8_t> payload(static_cast<std::size_t>(2 * stride), 0xEE);
  std::copy(bytes.begin(), bytes.begin() + split * bb, payload.begin() + 8);  // shard 0, at byte 8
  std::copy(bytes.begin() + split * bb, bytes.end(), payload.begin() + stride);
  std::vector<k::GgufRun> runs = {{0, zeros, 0, 0, k::kGgufZeroRun},
                                  {zeros, split * tr.block_elements, 0, 8, id(type)},
                                  {zeros + split * tr.block_elements, (blocks - split) * tr.block_elements, 0, stride,
                                   id(type)}};
  std::int64_t groups = 0;
  for (auto& r : runs) r.first_group = groups, groups += k::gguf_groups(r.numel);
  auto d_pay = to_device(payload);
  auto d_runs = to_device(runs);
  const std::int64_t total = zeros + numel;
  const auto want = [&](std::int64_t e) {
    return static_cast<T>(e < zeros ? 0.0f : reference_value(type, bytes.data(), e - zeros));
  };
  Buffer<T> out(static_cast<std::size_t>(total), MemCategory::Workspace);
  k::dequantize_gguf(d_pay.data(), d_runs.data(), 3, 0, groups, 0, total, out.data());
  const std::vector<T> got = to_host(out);
  for (std::int64_t e = 0; e < total; ++e) {
    const T w = want(e);
    ASSERT_EQ(std::memcmp(&got[static_cast<std::size_t>(e)], &w, sizeof(T)), 0)
        << tr.name << " element " << e << ": " << static_cast<float>(got[static_cast<std::size_t>(e)]) << " vs "
        << static_cast<float>(w);
  }
  // A part: groups 1 .. groups-2, elements from the middle of group 1's first run on.
  const std::int64_t first = zeros + 5, last = total - 7;
  std::vector<T> sentinel(static_cast<std::size_t>(last - first), static_cast<T>(-77.0f));
  auto part = to_device(sentinel);
  k::dequantize_gguf(d_pay.data(), d_runs.data(), 3, 1, groups - 1, first, last, part.data());
  const std::vector<T> got_part = to_host(part);
  for (std::int64_t e = first; e < last; ++e) {
    std::int64_t g = 0;  // the group of element e
    for (const auto& r : runs)
      if (e >= r.local && e < r.local + r.numel) g = r.first_group + (e - r.local) / 32;
    const bool in = g >= 1 && g < groups - 1;
    const T w = in ? want(e) : static_cast<T>(-77.0f);
    ASSERT_EQ(std::memcmp(&got_part[static_cast<std::size_t>(e - first)], &w, sizeof(T)), 0)
        << tr.name << " (part) element " << e << " group " << g;
  }
}

}  // namespace

TEST(KernelsDequant, GgufEveryTypeEqualsTheFormatsDequantization) {
  for (GgmlType t : kGgufTypes) {
    EXPECT_TRUE(k::gguf_kernel_type(id(t))) << traits_of(t).name;
    check_gguf_type<float>(t);
  }
  EXPECT_FALSE(k::gguf_kernel_type(id(GgmlType::Q5_0)));
}
TEST(KernelsDequant, GgufBf16IsTheReferenceRounded) {
  for (GgmlType t : kGgufTypes) check_gguf_type<bf16>(t);
}

// Every finite half as a Q8_0 scale, and as F16 values: the kernel's device-side half
// conversion equals formats::half_to_float's for all 63488 of them (and the subnormals).
TEST(KernelsDequant, GgufEveryFiniteHalf) {
  std::vector<std::uint8_t> f16;
  for (std::uint32_t h = 0; h < 65536; ++h)
    if ((h & 0x7C00u) != 0x7C00u) f16.push_back(static_cast<std::uint8_t>(h & 0xFF)), f16.push_back(static_cast<std::uint8_t>(h >> 8));
  const std::int64_t n = static_cast<std::int64_t>(f16.size() / 2);
  std::vector<k::GgufRun> runs = {{0, n, 0, 0, id(GgmlType::F16)}};
  auto d_pay = to_device(f16);
  auto d_runs = to_device(runs);
  Buffer<float> out(static_cast<std::size_t>(n), MemCategory::Workspace);
  k::dequantize_gguf(d_pay.data(), d_runs.data(), 1, 0, k::gguf_groups(n), 0, n, out.data());
  const std::vector<float> got = to_host(out);
  for (std::int64_t i = 0; i < n; ++i) {
    const float want = reference_value(GgmlType::F16, f16.data(), i);
    ASSERT_EQ(std::memcmp(&got[static_cast<std::size_t>(i)], &want, 4), 0) << "half " << i;
  }
}

namespace {

/// A Llama whose matrices have 256-multiple rows (so K-quant rows fit), LoRA on q and v, and
/// the block type of each frozen matrix: every decodable type, a padded vocabulary of 320
/// rows of which the "file" holds 300.
struct GgufModel {
  model::ModelDims dims;
  std::vector<model::ParamSpec> specs;
  std::map<std::string, std::vector<std::uint8_t>> file;  ///< each matrix's bytes, rows in order

  explicit GgufModel(GgmlType o_proj = GgmlType::Q4_1) {
    model::ModelSettings c;
    c.family = model::Family::Llama;
    c.vocab_size = 300;
    c.vocab_pad_multiple = 64;
    c.d_model = 256;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.ffn_dim = 512;
    c.max_seq_len = 16;
    c.tie_embeddings = false;
    c.lora_rank = 4;
    c.lora_targets = {"q", "v"};
    c.base_quant = BaseQuant::Gguf;
    dims = model::resolve_dims(c);
    const std::map<std::string, GgmlType> roles = {
        {"model.embed_tokens.weight", GgmlType::Q8_0}, {"lm_head.weight", GgmlType::Q6_K},
        {"self_attn.q_proj.weight", GgmlType::Q4_K},   {"self_attn.k_proj.weight", GgmlType::Q6_K},
        {"self_attn.v_proj.weight", GgmlType::Q8_0},   {"self_attn.o_proj.weight", o_proj},
        {"mlp.gate_proj.weight", GgmlType::Q4_0},      {"mlp.up_proj.weight", GgmlType::F16},
        {"mlp.down_proj.weight", GgmlType::Q6_K}};
    std::uint64_t seed = 1;
    for (const model::ParamSpec& p : model::build_param_specs(dims, 1)) {
      if (!p.frozen || p.shape.size() != 2) continue;
      GgmlType t = roles.count(p.name) ? roles.at(p.name) : roles.at(p.role);
      if (p.name == "model.layers.1.mlp.up_proj.weight") t = GgmlType::F32;
      if (p.name == "model.layers.1.mlp.down_proj.weight") t = GgmlType::BF16;
      const std::int64_t rows = p.is_embedding || p.role == "lm_head.weight" ? 300 : p.shape[0];
      dims.base_formats[p.name] = {id(t), rows};
      file[p.name] = random_blocks(t, rows * p.shape[1] / traits_of(t).block_elements, ++seed);
    }
  }
  /// Value of (row, col) of matrix `name` in the file (0 for rows it lacks).
  float value(const model::ParamSpec& p, std::int64_t row, std::int64_t col) const {
    const model::BaseTensorFormat& f = dims.base_formats.at(p.name);
    if (row >= f.rows) return 0.0f;
    return reference_value(static_cast<GgmlType>(f.ggml_type), file.at(p.name).data(), row * p.shape[1] + col);
  }
};

}  // namespace

// The shards of each unit's frozen segment, filled from the "file" as checkpoint/load.cpp
// fills them (each run's blocks from its global elements, row by row) and gathered end to
// end at the map's stride, dequantize into every frozen matrix's TP-local values exactly,
// zeros in the padding and absent rows; the 1-D slots are left to the caller; parts of a
// unit (groups_of), and the outer unit's matrices read as the model reads them kept in blocks
// (rectangles, gathered rows), give the same values. On 1, 2 and 3 shards and at tp 1 and 2;
// K-quant blocks do straddle shard boundaries here.
TEST(KernelsDequant, GgufMapShardsGatherIntoTheFilesValues) {
  const GgufModel m;
  int straddling = 0;
  for (int tp : {1, 2}) {
    const std::vector<model::ParamSpec> specs = model::build_param_specs(m.dims, tp);
    for (int shards : {1, 2, 3}) {
      const std::vector<model::UnitLayout> layouts = model::build_layouts(specs, model::num_units(m.dims), tp, shards);
      for (int rank = 0; rank < tp; ++rank) {
        for (const model::UnitLayout& L : layouts) {
          const parallel::GgufMap map = parallel::build_gguf_map(specs, L, tp, rank, m.dims.base_formats);
          const std::int64_t fsn = L.frozen_shard_numel, numel = L.frozen_padded();
          ASSERT_EQ(map.runs.size(), map.sources.size());
          std::vector<std::uint8_t> payload(static_cast<std::size_t>(map.stride * shards), 0);
          std::vector<std::int64_t> filled(static_cast<std::size_t>(shards), 0);
          std::int64_t next = 0;  // runs cover the segment in order, outside the dense slots
          for (std::size_t r = 0; r < map.runs.size(); ++r) {
            const k::GgufRun& run = map.runs[r];
            const parallel::GgufMap::Source& src = map.sources[r];
            for (const auto& d : map.dense)
              if (d.offset == next) next += d.numel;
            ASSERT_EQ(run.local, next) << "unit " << L.unit << " run " << r;
            next += run.numel;
            if (src.spec < 0) continue;
            const model::ParamSpec& p = specs[static_cast<std::size_t>(src.spec)];
            const formats::GgmlTypeTraits& tr = *formats::ggml_type_traits(run.type);
            ASSERT_EQ(src.shard, run.local / fsn) << "a block belongs to the shard of its first element";
            if (tr.block_elements > 1 && (run.local + run.numel - 1) / fsn != src.shard) ++straddling;
            ASSERT_EQ(src.shard_byte, filled[static_cast<std::size_t>(src.shard)]);
            const std::int64_t cols = p.shape[1], be = tr.block_elements, bb = tr.block_bytes;
            std::uint8_t* dst = payload.data() + src.shard * map.stride + src.shard_byte;
            for (std::int64_t g = src.global, left = run.numel; left > 0;) {
              const std::int64_t row = g / cols, col = g % cols, n = std::min(left, cols - col);
              const std::uint8_t* from = m.file.at(p.name).data() + (row * cols + col) / be * bb;
              std::copy(from, from + n / be * bb, dst);
              dst += n / be * bb;
              g += n;
              left -= n;
            }
            filled[static_cast<std::size_t>(src.shard)] += src.bytes;
          }
          for (const auto& d : map.dense)
            if (d.offset == next) next += d.numel;
          ASSERT_EQ(next, numel) << "unit " << L.unit;
          for (int s = 0; s < shards; ++s) {
            ASSERT_EQ(filled[static_cast<std::size_t>(s)], map.shard_bytes[static_cast<std::size_t>(s)]);
            ASSERT_LE(map.shard_bytes[static_cast<std::size_t>(s)], map.stride);
          }
          auto d_pay = to_device(payload);
          auto d_runs = to_device(map.runs);
          const float sentinel = -123.0f;
          auto out = to_device(std::vector<float>(static_cast<std::size_t>(numel), sentinel));
          k::dequantize_gguf(d_pay.data(), d_runs.data(), static_cast<int>(map.runs.size()), 0, map.groups, 0, numel,
                             out.data());
          const std::vector<float> got = to_host(out);
          std::vector<float> want(static_cast<std::size_t>(numel), 0.0f);
          for (const auto& d : map.dense) std::fill(want.begin() + d.offset, want.begin() + d.offset + d.numel, sentinel);
          for (const model::ParamSlot& slot : L.slots) {
            const model::ParamSpec& p = specs[static_cast<std::size_t>(slot.spec)];
            if (!p.frozen || p.shape.size() != 2) continue;
            const model::Box all{0, 0, slot.local_shape[0], slot.local_shape[1]};
            for (const model::BoxPair& bp : model::local_to_global(p, tp, rank, all))
              for (std::int64_t r = 0; r < bp.local.nrows; ++r)
                for (std::int64_t c = 0; c < bp.local.ncols; ++c)
                  want[static_cast<std::size_t>(slot.offset + (bp.local.row0 + r) * slot.local_shape[1] +
                                                bp.local.col0 + c)] =
                      m.value(p, bp.global.row0 + r, bp.global.col0 + c);
          }
          for (std::int64_t e = 0; e < numel; ++e)
            ASSERT_EQ(std::memcmp(&got[static_cast<std::size_t>(e)], &want[static_cast<std::size_t>(e)], 4), 0)
                << "tp " << tp << " rank " << rank << " shards " << shards << " unit " << L.unit << " element " << e
                << ": " << got[static_cast<std::size_t>(e)] << " vs " << want[static_cast<std::size_t>(e)];
          // Parts of the unit alone (rows of an embedding, a chunk of a head): groups_of's groups
          // restricted to [first, last) give exactly those elements of the whole.
          std::mt19937_64 gen(static_cast<std::uint64_t>(L.unit * 7 + shards + 3 * tp + rank));
          for (int k = 0; k < 4; ++k) {
            const std::int64_t first = static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(numel));
            const std::int64_t last = first + 1 + static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(numel - first));
            const auto [g0, g1] = map.groups_of(first, last);
            auto part = to_device(std::vector<float>(static_cast<std::size_t>(last - first), sentinel));
            k::dequantize_gguf(d_pay.data(), d_runs.data(), static_cast<int>(map.runs.size()), g0, g1, first, last,
                               part.data());
            const std::vector<float> got_part = to_host(part);
            ASSERT_EQ(0, std::memcmp(got_part.data(), got.data() + first, static_cast<std::size_t>(last - first) * 4))
                << "unit " << L.unit << " elements [" << first << ", " << last << ") through groups [" << g0 << ", "
                << g1 << ")";
          }
          // The outer unit kept in its blocks (model::OuterParams): rectangles of its matrices
          // (the head's vocabulary and column chunks, ragged and unaligned ones too) and gathered
          // rows (the embedding lookup) through kernels::dequantize_rect / dequantize_gather_rows
          // give exactly those elements of the whole.
          if (L.unit != 0) continue;
          k::QuantSegment seg;
          seg.format = k::QuantFormat::Gguf;
          seg.payload = d_pay.data();
          seg.gguf_runs = d_runs.data();
          seg.n_runs = static_cast<int>(map.runs.size());
          for (const model::ParamSlot& slot : L.slots) {
            const model::ParamSpec& p = specs[static_cast<std::size_t>(slot.spec)];
            if (!p.frozen || p.shape.size() != 2) continue;
            const std::int64_t rows = slot.local_shape[0], cols = slot.local_shape[1];
            struct Rect { std::int64_t row0, rows, col0, cols; };
            for (const Rect& rc : {Rect{0, rows, 0, cols}, Rect{3, 50, 0, cols}, Rect{0, rows, 32, 64},
                                   Rect{1, 7, 5, 29}, Rect{rows - 1, 1, cols - 1, 1}, Rect{0, rows, 96, 33}}) {
              const std::int64_t ld = rc.cols + 2;
              auto out = to_device(std::vector<float>(static_cast<std::size_t>(rc.rows * ld), sentinel));
              k::dequantize_rect(seg, slot.offset, cols, rc.row0, rc.rows, rc.col0, rc.cols, out.data(), ld);
              const std::vector<float> got_rect = to_host(out);
              for (std::int64_t r = 0; r < rc.rows; ++r)
                for (std::int64_t c = 0; c < ld; ++c) {
                  const float w = c < rc.cols ? got[static_cast<std::size_t>(slot.offset + (rc.row0 + r) * cols + rc.col0 + c)]
                                              : sentinel;
                  ASSERT_EQ(std::memcmp(&got_rect[static_cast<std::size_t>(r * ld + c)], &w, 4), 0)
                      << p.name << " tp " << tp << " rank " << rank << " shards " << shards << " rect (" << rc.row0
                      << "+" << rc.rows << ", " << rc.col0 << "+" << rc.cols << ") at " << r << ", " << c;
                }
            }
            // Rows of the slot's vocabulary slice [start, start + rows) looked up; ids outside it
            // (another tp rank's) give zero rows.
            const std::int64_t start = 1000;
            const std::vector<std::int32_t> ids = {1000, static_cast<std::int32_t>(start + rows - 1), 999,
                                                   static_cast<std::int32_t>(start + rows), 1077, 1077, 1001};
            auto d_ids = to_device(ids);
            Buffer<float> looked(ids.size() * static_cast<std::size_t>(cols), MemCategory::Workspace);
            k::dequantize_gather_rows(seg, slot.offset, cols, d_ids.data(), static_cast<int>(ids.size()), start, rows,
                                      looked.data());
            const std::vector<float> got_rows = to_host(looked);
            for (std::size_t i = 0; i < ids.size(); ++i)
              for (std::int64_t c = 0; c < cols; ++c) {
                const std::int64_t row = ids[i] - start;
                const float w = row >= 0 && row < rows ? got[static_cast<std::size_t>(slot.offset + row * cols + c)] : 0.0f;
                ASSERT_EQ(std::memcmp(&got_rows[i * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)], &w, 4), 0)
                    << p.name << " id " << ids[i] << " column " << c;
              }
          }
        }
      }
    }
  }
  EXPECT_GT(straddling, 0) << "no K-quant block straddles a shard boundary: the case is not tested";
}

// A tensor-parallel slice that would split a block is refused, naming the tensor and its type.
TEST(KernelsDequant, GgufSliceSplittingABlockIsRefused) {
  const GgufModel m(GgmlType::Q4_K);  // o_proj: 256 columns in blocks of 256; tp 2 gives 128 each
  const std::vector<model::ParamSpec> specs = model::build_param_specs(m.dims, 2);
  const std::vector<model::UnitLayout> layouts = model::build_layouts(specs, model::num_units(m.dims), 2, 1);
  try {
    parallel::build_gguf_map(specs, layouts[1], 2, 0, m.dims.base_formats);
    FAIL() << "a 128-column slice of Q4_K rows was accepted";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.layers.0.self_attn.o_proj.weight (256 x 256) is Q4_K"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parallel.tp=2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.base_quant=nf4"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(parallel::build_gguf_map(specs, layouts[1], 2, 0, GgufModel().dims.base_formats));
}
