// ggml block formats -> float32, following gguf.quants (gguf-py) operation by operation.
// This file is compiled with -ffp-contract=off (src/CMakeLists.txt): a fused multiply-add
// would round once where the reference rounds twice.
#include "formats/gguf_dequant.hpp"

#include <algorithm>
#include <cstring>

#include "formats/half.hpp"
#include "formats/le_bytes.hpp"

namespace meshtrain::formats {
namespace {

constexpr std::int64_t kQK = 256;  // elements of a K-quant super-block

std::uint16_t u16(const std::byte* p) {
  return static_cast<std::uint16_t>(load_le16(reinterpret_cast<const unsigned char*>(p)));
}
float f16(const std::byte* p) { return half_to_float(u16(p)); }
unsigned byte(const std::byte* p, std::int64_t i) { return static_cast<unsigned>(p[i]); }

// Block decoders: the whole block into out[0, block elements).

/// Q8_0: f16 d, 32 x int8 q; x = d * q.
void q8_0(const std::byte* b, float* out) {
  const float d = f16(b);
  for (int i = 0; i < 32; ++i) out[i] = d * static_cast<float>(static_cast<std::int8_t>(byte(b + 2, i)));
}

/// Q4_0: f16 d, 16 bytes of nibbles (low nibbles: elements 0..15, high: 16..31); x = d * (q - 8).
void q4_0(const std::byte* b, float* out) {
  const float d = f16(b);
  for (int i = 0; i < 16; ++i) {
    const unsigned q = byte(b + 2, i);
    out[i] = d * static_cast<float>(static_cast<int>(q & 0x0F) - 8);
    out[i + 16] = d * static_cast<float>(static_cast<int>(q >> 4) - 8);
  }
}

/// Q4_1: f16 d, f16 m, 16 bytes of nibbles; x = d * q + m.
void q4_1(const std::byte* b, float* out) {
  const float d = f16(b), m = f16(b + 2);
  for (int i = 0; i < 16; ++i) {
    const unsigned q = byte(b + 4, i);
    out[i] = d * static_cast<float>(q & 0x0F) + m;
    out[i + 16] = d * static_cast<float>(q >> 4) + m;
  }
}

/// Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins for 8 sub-blocks of 32, 128 bytes
/// of nibbles (byte i*32 + l: low nibble = sub-block 2i, high = 2i+1, element l);
/// x = (d * sc) * q - (dmin * m).
void q4_k(const std::byte* b, float* out) {
  const float d = f16(b), dmin = f16(b + 2);
  const std::byte* s = b + 4;
  const std::byte* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    unsigned sc, m;
    if (j < 4) {
      sc = byte(s, j) & 0x3F;
      m = byte(s, j + 4) & 0x3F;
    } else {
      sc = (byte(s, j + 4) & 0x0F) | ((byte(s, j - 4) >> 2) & 0x30);
      m = (byte(s, j + 4) >> 4) | ((byte(s, j) >> 2) & 0x30);
    }
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      const unsigned q = (byte(qs, (j / 2) * 32 + l) >> (4 * (j % 2))) & 0x0F;
      out[j * 32 + l] = dl * static_cast<float>(q) - ml;
    }
  }
}

/// Q6_K: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 scales (one per 16
/// elements), f16 d; x = (d * scale) * (q - 32).
void q6_k(const std::byte* b, float* out) {
  const std::byte* ql = b;
  const std::byte* qh = b + kQK / 2;
  const std::byte* sc = b + kQK / 2 + kQK / 4;
  const float d = f16(b + kQK / 2 + kQK / 4 + kQK / 16);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, r = e % 128;
    const unsigned lo = (byte(ql, h * 64 + r % 64) >> (4 * (r / 64))) & 0x0F;
    const unsigned hi = (byte(qh, h * 32 + r % 32) >> (2 * (r / 32))) & 0x03;
    const int q = static_cast<int>(lo | (hi << 4)) - 32;
    const float ds = d * static_cast<float>(static_cast<std::int8_t>(byte(sc, e / 16)));
    out[e] = ds * static_cast<float>(q);
  }
}

}  // namespace

bool gguf_can_dequantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q4_K: case GgmlType::Q6_K: return true;
    default: return false;
  }
}

void gguf_dequantize(GgmlType type, const std::byte* row, std::int64_t first, std::int64_t n, float* out) {
  switch (type) {
    case GgmlType::F32:
      std::memcpy(out, row + 4 * first, static_cast<std::size_t>(n) * 4);
      return;
    case GgmlType::F16:
      for (std::int64_t i = 0; i < n; ++i) out[i] = f16(row + 2 * (first + i));
      return;
    case GgmlType::BF16:
      for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(u16(row + 2 * (first + i)));
      return;
    default: break;
  }
  const GgmlTypeTraits& tr = *ggml_type_traits(static_cast<std::uint32_t>(type));
  const std::int64_t be = tr.block_elements, bb = tr.block_bytes;
  void (*decode)(const std::byte*, float*) = type == GgmlType::Q8_0   ? q8_0
                                             : type == GgmlType::Q4_0 ? q4_0
                                             : type == GgmlType::Q4_1 ? q4_1
                                             : type == GgmlType::Q4_K ? q4_k
                                                                      : q6_k;
  float block[kQK];
  for (std::int64_t blk = first / be; blk * be < first + n; ++blk) {
    decode(row + blk * bb, block);
    const std::int64_t a = std::max(first, blk * be), z = std::min(first + n, (blk + 1) * be);
    std::copy(block + (a - blk * be), block + (z - blk * be), out + (a - first));
  }
}

std::int64_t gguf_first_nonfinite_block(GgmlType type, const std::byte* blocks, std::int64_t n_blocks) {
  // Offsets of the block's f16 fields whose exponent bits must not be all ones, or the float
  // value itself (F32: its upper half holds the exponent).
  const auto inf_or_nan16 = [](const std::byte* p) { return (u16(p) & 0x7C00u) == 0x7C00u; };
  const auto inf_or_nan_bf16 = [](const std::byte* p) { return (u16(p) & 0x7F80u) == 0x7F80u; };
  const GgmlTypeTraits& tr = *ggml_type_traits(static_cast<std::uint32_t>(type));
  for (std::int64_t k = 0; k < n_blocks; ++k) {
    const std::byte* b = blocks + k * tr.block_bytes;
    bool bad = false;
    switch (type) {
      case GgmlType::F32: bad = inf_or_nan_bf16(b + 2); break;
      case GgmlType::F16: case GgmlType::Q8_0: case GgmlType::Q4_0: bad = inf_or_nan16(b); break;
      case GgmlType::BF16: bad = inf_or_nan_bf16(b); break;
      case GgmlType::Q4_1: case GgmlType::Q4_K: bad = inf_or_nan16(b) || inf_or_nan16(b + 2); break;
      case GgmlType::Q6_K: bad = inf_or_nan16(b + kQK / 2 + kQK / 4 + kQK / 16); break;
      default: break;
    }
    if (bad) return k;
  }
  return -1;
}

}  // namespace meshtrain::formats
