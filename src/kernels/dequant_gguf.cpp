// The GGUF block types of a model.base_quant=gguf base -> T, following formats/gguf_dequant.cpp
// (itself gguf.quants, operation by operation). This file is compiled with -ffp-contract=off
// (src/CMakeLists.txt); on CUDA devices every product and sum goes through the _rn intrinsics,
// which nvcc never fuses: a fused multiply-add would round once where the reference rounds twice.
#include "kernels/dequant_gguf.hpp"

#include "formats/gguf_file.hpp"
#include "kernel_common.hpp"

namespace meshtrain::kernels {
using namespace detail;

namespace {

using formats::GgmlType;
// The type numbers as plain constants (device code cannot call a host function, constexpr or not).
constexpr std::uint32_t kF32 = static_cast<std::uint32_t>(GgmlType::F32);
constexpr std::uint32_t kF16 = static_cast<std::uint32_t>(GgmlType::F16);
constexpr std::uint32_t kBF16 = static_cast<std::uint32_t>(GgmlType::BF16);
constexpr std::uint32_t kQ8_0 = static_cast<std::uint32_t>(GgmlType::Q8_0);
constexpr std::uint32_t kQ4_0 = static_cast<std::uint32_t>(GgmlType::Q4_0);
constexpr std::uint32_t kQ4_1 = static_cast<std::uint32_t>(GgmlType::Q4_1);
constexpr std::uint32_t kQ4_K = static_cast<std::uint32_t>(GgmlType::Q4_K);
constexpr std::uint32_t kQ6_K = static_cast<std::uint32_t>(GgmlType::Q6_K);

// One rounding per operation, on every backend.
KOKKOS_INLINE_FUNCTION float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KOKKOS_INLINE_FUNCTION float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KOKKOS_INLINE_FUNCTION float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

KOKKOS_INLINE_FUNCTION float bits_float(std::uint32_t u) {
  float f;
  const char* s = reinterpret_cast<const char*>(&u);
  char* d = reinterpret_cast<char*>(&f);
  for (int i = 0; i < 4; ++i) d[i] = s[i];
  return f;
}

KOKKOS_INLINE_FUNCTION std::uint32_t le16(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8;
}

/// IEEE half -> float, exact (formats::half_to_float, in device code).
KOKKOS_INLINE_FUNCTION float half_float(std::uint32_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
  if (exp == 0x1Fu) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      std::uint32_t e = 0;
      mant <<= 1;
      while ((mant & 0x400u) == 0) {
        ++e;
        mant <<= 1;
      }
      bits = sign | ((127u - 15u - e) << 23) | ((mant & 0x3FFu) << 13);
    }
  } else {
    bits = sign | ((exp + 127u - 15u) << 23) | (mant << 13);
  }
  return bits_float(bits);
}

KOKKOS_INLINE_FUNCTION float f16_at(const std::uint8_t* p) { return half_float(le16(p)); }

/// The run holding group g (the last run whose first group is <= g).
KOKKOS_INLINE_FUNCTION int find_group(const GgufRun* runs, int n_runs, std::int64_t g) {
  int lo = 0, hi = n_runs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (runs[mid].first_group <= g) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// Element i (< n) of the group at element offset `o` (a multiple of 32) of a run of type
/// `type` whose blocks start at `b`: o selects the block and, in K-quant blocks, the sub-block.
/// Written as the reference's expressions (formats/gguf_dequant.cpp) for one element.
template <class Store>
KOKKOS_INLINE_FUNCTION void decode_group(std::uint32_t type, const std::uint8_t* b, std::int64_t o, int n,
                                         Store&& store) {
  if (type == kGgufZeroRun) {
    for (int i = 0; i < n; ++i) store(i, 0.0f);
  } else if (type == kF32) {
    const std::uint8_t* p = b + 4 * o;
    for (int i = 0; i < n; ++i) store(i, bits_float(le16(p + 4 * i) | le16(p + 4 * i + 2) << 16));
  } else if (type == kF16) {
    for (int i = 0; i < n; ++i) store(i, f16_at(b + 2 * (o + i)));
  } else if (type == kBF16) {
    for (int i = 0; i < n; ++i) store(i, bits_float(le16(b + 2 * (o + i)) << 16));
  } else if (type == kQ8_0) {  // f16 d, 32 x int8 q: d * q
    const std::uint8_t* blk = b + (o / 32) * 34;
    const float d = f16_at(blk);
    for (int i = 0; i < n; ++i) store(i, mul(d, static_cast<float>(static_cast<std::int8_t>(blk[2 + i]))));
  } else if (type == kQ4_0) {  // f16 d, nibbles (low: 0..15, high: 16..31): d * (q - 8)
    const std::uint8_t* blk = b + (o / 32) * 18;
    const float d = f16_at(blk);
    for (int i = 0; i < n; ++i) {
      const unsigned q = blk[2 + i % 16];
      store(i, mul(d, static_cast<float>(static_cast<int>(i < 16 ? q & 0x0F : q >> 4) - 8)));
    }
  } else if (type == kQ4_1) {  // f16 d, f16 m, nibbles: d * q + m
    const std::uint8_t* blk = b + (o / 32) * 20;
    const float d = f16_at(blk), m = f16_at(blk + 2);
    for (int i = 0; i < n; ++i) {
      const unsigned q = blk[4 + i % 16];
      store(i, add(mul(d, static_cast<float>(i < 16 ? q & 0x0F : q >> 4)), m));
    }
  } else if (type == kQ4_K) {  // sub-block j: (d * sc) * q - (dmin * m)
    const std::uint8_t* blk = b + (o / 256) * 144;
    const int j = static_cast<int>((o % 256) / 32);
    const float d = f16_at(blk), dmin = f16_at(blk + 2);
    const std::uint8_t* s = blk + 4;
    unsigned sc, m;
    if (j < 4) {
      sc = s[j] & 0x3Fu;
      m = s[j + 4] & 0x3Fu;
    } else {
      sc = (s[j + 4] & 0x0Fu) | ((s[j - 4] >> 2) & 0x30u);
      m = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30u);
    }
    const float dl = mul(d, static_cast<float>(sc)), ml = mul(dmin, static_cast<float>(m));
    const std::uint8_t* qs = blk + 16 + (j / 2) * 32;
    for (int i = 0; i < n; ++i) {
      const unsigned q = (static_cast<unsigned>(qs[i]) >> (4 * (j % 2))) & 0x0Fu;
      store(i, sub(mul(dl, static_cast<float>(q)), ml));
    }
  } else {  // Q6_K: ql (128), qh (64), 16 int8 scales, f16 d: (d * scale) * (q - 32)
    const std::uint8_t* blk = b + (o / 256) * 210;
    const std::uint8_t* ql = blk;
    const std::uint8_t* qh = blk + 128;
    const std::uint8_t* sc = blk + 192;
    const float d = f16_at(blk + 208);
    const int e0 = static_cast<int>(o % 256);
    for (int i = 0; i < n; ++i) {
      const int e = e0 + i, h = e / 128, r = e % 128;
      const unsigned lo = (static_cast<unsigned>(ql[h * 64 + r % 64]) >> (4 * (r / 64))) & 0x0Fu;
      const unsigned hi = (static_cast<unsigned>(qh[h * 32 + r % 32]) >> (2 * (r / 32))) & 0x03u;
      const int q = static_cast<int>(lo | (hi << 4)) - 32;
      const float ds = mul(d, static_cast<float>(static_cast<std::int8_t>(sc[e / 16])));
      store(i, mul(ds, static_cast<float>(q)));
    }
  }
}

/// The run that holds segment element e, or -1 (runs are sorted by element and disjoint).
KOKKOS_INLINE_FUNCTION int find_element(const GgufRun* runs, int n_runs, std::int64_t e) {
  int lo = 0, hi = n_runs - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (e < runs[mid].local) hi = mid - 1;
    else if (e >= runs[mid].local + runs[mid].numel) lo = mid + 1;
    else return mid;
  }
  return -1;
}

/// out[0 .. n) = segment elements [e, e + n): every group that overlaps them decoded once
/// (one group when [e, e + n) lies in one, as a 32-element piece of a row of a quantized
/// matrix does); an element in no run (a 1-D slot, kept in T) is 0.
template <class T>
KOKKOS_INLINE_FUNCTION void decode_elements(const std::uint8_t* payload, const GgufRun* runs, int n_runs,
                                            std::int64_t e, std::int64_t n, T* out) {
  for (std::int64_t c = 0; c < n;) {
    const int ri = find_element(runs, n_runs, e + c);
    if (ri < 0) {
      out[c++] = static_cast<T>(0.0f);
      continue;
    }
    const GgufRun& r = runs[ri];
    const std::int64_t o = (e + c - r.local) / kGgufGroup * kGgufGroup;  // the group's element offset in the run
    const std::int64_t left = r.numel - o;
    const int gn = static_cast<int>(left < kGgufGroup ? left : kGgufGroup);
    const std::int64_t base = r.local + o - e;  // out index of the group's first element
    const std::int64_t from = c;
    decode_group(r.type, payload + r.byte, o, gn, [&](int i, float v) {
      const std::int64_t k = base + i;
      if (k >= from && k < n) out[k] = static_cast<T>(v);
    });
    c = base + gn;
  }
}

}  // namespace

bool gguf_kernel_type(std::uint32_t t) {
  for (std::uint32_t k : {kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ4_K, kQ6_K})
    if (t == k) return true;
  return false;
}

template <class T>
void dequantize_gguf(const std::uint8_t* payload, const GgufRun* runs, int n_runs, std::int64_t group_begin,
                     std::int64_t group_end, std::int64_t first, std::int64_t last, T* out) {
  if (group_end <= group_begin || n_runs == 0) return;
  // One iteration per group: its run found once, its block's scales decoded once.
  Kokkos::parallel_for(
      "Kernels::dequantize_gguf", Range64(group_begin, group_end), KOKKOS_LAMBDA(std::int64_t g) {
        const GgufRun& r = runs[find_group(runs, n_runs, g)];
        const std::int64_t o = (g - r.first_group) * kGgufGroup;  // element offset in the run
        const std::int64_t left = r.numel - o;
        const int n = static_cast<int>(left < kGgufGroup ? left : kGgufGroup);
        const std::int64_t e0 = r.local + o;
        decode_group(r.type, payload + r.byte, o, n, [&](int i, float v) {
          const std::int64_t e = e0 + i;
          if (e >= first && e < last) out[e - first] = static_cast<T>(v);
        });
      });
}

template <class T>
void dequantize_gguf_rect(const std::uint8_t* payload, const GgufRun* runs, int n_runs, std::int64_t offset,
                          std::int64_t row_len, std::int64_t row0, std::int64_t rows, std::int64_t col0,
                          std::int64_t cols, T* out, std::int64_t ld_out) {
  if (rows <= 0 || cols <= 0) return;
  const int pieces = static_cast<int>((cols + kGgufGroup - 1) / kGgufGroup);
  // One team per row of the rectangle (its cols elements are contiguous in the segment), a
  // 32-element piece of it per team thread.
  Kokkos::parallel_for(
      "Kernels::dequantize_gguf_rect", row_policy(static_cast<int>(rows)), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t e = offset + (row0 + r) * row_len + col0;
        T* o = out + r * ld_out;
        team_for(team, pieces, [&](int k) {
          const std::int64_t c0 = static_cast<std::int64_t>(k) * kGgufGroup;
          decode_elements(payload, runs, n_runs, e + c0, cols - c0 < kGgufGroup ? cols - c0 : kGgufGroup, o + c0);
        });
      });
}

template <class T>
void dequantize_gguf_gather_rows(const std::uint8_t* payload, const GgufRun* runs, int n_runs, std::int64_t offset,
                                 std::int64_t row_len, const std::int32_t* index, int n, std::int64_t row_start,
                                 std::int64_t row_count, T* out) {
  if (n <= 0) return;
  const int pieces = static_cast<int>((row_len + kGgufGroup - 1) / kGgufGroup);
  Kokkos::parallel_for(
      "Kernels::dequantize_gguf_gather_rows", row_policy(n), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t i = team.league_rank();
        const std::int64_t row = static_cast<std::int64_t>(index[i]) - row_start;
        T* o = out + i * row_len;
        const bool mine = row >= 0 && row < row_count;  // else a token of another tp rank's vocabulary slice
        team_for(team, pieces, [&](int k) {
          const std::int64_t c0 = static_cast<std::int64_t>(k) * kGgufGroup;
          const std::int64_t m = row_len - c0 < kGgufGroup ? row_len - c0 : kGgufGroup;
          if (mine) {
            decode_elements(payload, runs, n_runs, offset + row * row_len + c0, m, o + c0);
          } else {
            for (std::int64_t c = 0; c < m; ++c) o[c0 + c] = static_cast<T>(0.0f);
          }
        });
      });
}

#define MESHTRAIN_INSTANTIATE_GGUF(T)                                                                              \
  template void dequantize_gguf<T>(const std::uint8_t*, const GgufRun*, int, std::int64_t, std::int64_t,          \
                                   std::int64_t, std::int64_t, T*);                                                \
  template void dequantize_gguf_rect<T>(const std::uint8_t*, const GgufRun*, int, std::int64_t, std::int64_t,     \
                                        std::int64_t, std::int64_t, std::int64_t, std::int64_t, T*, std::int64_t); \
  template void dequantize_gguf_gather_rows<T>(const std::uint8_t*, const GgufRun*, int, std::int64_t,            \
                                               std::int64_t, const std::int32_t*, int, std::int64_t, std::int64_t, \
                                               T*);
MESHTRAIN_INSTANTIATE_GGUF(float)
MESHTRAIN_INSTANTIATE_GGUF(double)
MESHTRAIN_INSTANTIATE_GGUF(bf16)
#undef MESHTRAIN_INSTANTIATE_GGUF

}  // namespace meshtrain::kernels
