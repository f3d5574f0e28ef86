#include "kernels/dequant.hpp"

#include "formats/nf4.hpp"
#include "kernel_common.hpp"

namespace meshtrain::kernels {
using namespace detail;

namespace {

constexpr int kBlock = formats::nf4::kBlock;
constexpr int kGroup = formats::nf4::kScaleGroup;

/// The 16 NF4 values, captured by value into the kernel (constant memory on GPUs).
struct Nf4Table {
  float v[16];
};

Nf4Table nf4_table() {
  Nf4Table table{};
  for (int i = 0; i < 16; ++i) table.v[i] = formats::nf4::kCodes[i];
  return table;
}

/// The run holding local block lb, or -1 (binary search: runs are sorted and disjoint).
KOKKOS_INLINE_FUNCTION int find_run(const QuantRun* runs, int n_runs, std::int64_t lb) {
  int lo = 0, hi = n_runs - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (lb < runs[mid].local_block) hi = mid - 1;
    else if (lb >= runs[mid].local_block + runs[mid].n_blocks) lo = mid + 1;
    else return mid;
  }
  return -1;
}

/// Block lb of a segment as its weights are read: its codes and the float its code values
/// are multiplied by. codes == nullptr: the block is outside every run (its weights are 0).
struct BlockView {
  const std::uint8_t* codes = nullptr;
  float scale = 0.0f;
};

KOKKOS_INLINE_FUNCTION BlockView block_view(const QuantSegment& q, std::int64_t lb) {
  BlockView b;
  const int r = find_run(q.runs, q.n_runs, lb);
  if (r < 0) return b;
  const std::int64_t shard_blocks = q.shard_numel / kBlock;
  const std::int64_t s = lb / shard_blocks, kb = lb - s * shard_blocks;  // shard, block within it
  const std::uint8_t* shard = q.payload + s * q.payload_stride;
  if (q.format == QuantFormat::Nf4) {
    const std::uint8_t scale = shard[q.shard_numel / 2 + kb];
    const std::int64_t gb = q.runs[r].global_block + (lb - q.runs[r].local_block);
    const float top = q.group_max[q.runs[r].group_base + gb / kGroup];
    b.codes = shard + kb * (kBlock / 2);
    b.scale = static_cast<float>(scale) * (top / 255.0f);  // formats::nf4::block_scale
  } else {
    // The absmax array starts at byte shard_numel (a multiple of 64) of a 4-aligned stride.
    b.codes = shard + kb * kBlock;
    b.scale = reinterpret_cast<const float*>(shard + q.shard_numel)[kb] / 127.0f;  // formats::int8_blocks::dequantize
  }
  return b;
}

/// Weight i (< 64) of block b, in float: the codec's expression.
KOKKOS_INLINE_FUNCTION float block_weight(bool nf4, const Nf4Table& table, const BlockView& b, int i) {
  if (b.codes == nullptr) return 0.0f;
  if (nf4) {
    const std::uint8_t byte = b.codes[i / 2];
    return table.v[(i & 1) != 0 ? (byte & 0x0F) : (byte >> 4)] * b.scale;
  }
  return static_cast<float>(reinterpret_cast<const std::int8_t*>(b.codes)[i]) * b.scale;
}

/// Writes n consecutive weights of the segment, elements [e, e + n), to out[0 .. n): on host
/// a block at a time (its run and scale found once per block), on GPUs an element per team
/// thread.
template <class T>
KOKKOS_INLINE_FUNCTION void dequantize_span(const Member& team, const QuantSegment& q, const Nf4Table& table,
                                            std::int64_t e, int n, T* out) {
  if constexpr (kHostExec) {
    for (int c = 0; c < n;) {
      const std::int64_t lb = (e + c) / kBlock;
      const int i0 = static_cast<int>((e + c) - lb * kBlock);
      const int m = kBlock - i0 < n - c ? kBlock - i0 : n - c;
      const BlockView b = block_view(q, lb);
      for (int i = 0; i < m; ++i) out[c + i] = static_cast<T>(block_weight(q.format == QuantFormat::Nf4, table, b, i0 + i));
      c += m;
    }
  } else {
    team_for(team, n, [&](int c) {
      const std::int64_t lb = (e + c) / kBlock;
      out[c] = static_cast<T>(block_weight(q.format == QuantFormat::Nf4, table, block_view(q, lb), static_cast<int>((e + c) - lb * kBlock)));
    });
  }
}

/// The whole segment (numel elements), one iteration per 64-weight block.
template <class T>
void dequantize_segment(const char* name, const QuantSegment& q, T* out, std::int64_t numel) {
  const Nf4Table table = nf4_table();
  Kokkos::parallel_for(
      name, Range64(0, numel / kBlock), KOKKOS_LAMBDA(std::int64_t lb) {
        T* o = out + lb * kBlock;
        const BlockView b = block_view(q, lb);
        for (int i = 0; i < kBlock; ++i) o[i] = static_cast<T>(block_weight(q.format == QuantFormat::Nf4, table, b, i));
      });
}

}  // namespace

template <class T>
void dequantize_nf4(const std::uint8_t* payload, std::int64_t payload_stride, std::int64_t shard_numel,
                    const QuantRun* runs, int n_runs, const float* group_max, T* out, std::int64_t numel) {
  dequantize_segment("Kernels::dequantize_nf4", QuantSegment{QuantFormat::Nf4, payload, payload_stride, shard_numel, runs, n_runs, group_max},
                     out, numel);
}

template <class T>
void dequantize_int8(const std::uint8_t* payload, std::int64_t payload_stride, std::int64_t shard_numel,
                     const QuantRun* runs, int n_runs, T* out, std::int64_t numel) {
  dequantize_segment("Kernels::dequantize_int8", QuantSegment{QuantFormat::Int8, payload, payload_stride, shard_numel, runs, n_runs, nullptr},
                     out, numel);
}

template <class T>
void dequantize_rect(const QuantSegment& q, std::int64_t offset, std::int64_t row_len, std::int64_t row0,
                     std::int64_t rows, std::int64_t col0, std::int64_t cols, T* out, std::int64_t ld_out) {
  if (rows <= 0 || cols <= 0) return;
  if (q.format == QuantFormat::Gguf) {
    dequantize_gguf_rect(q.payload, q.gguf_runs, q.n_runs, offset, row_len, row0, rows, col0, cols, out, ld_out);
    return;
  }
  const Nf4Table table = nf4_table();
  const QuantSegment seg = q;
  const int n = static_cast<int>(cols);
  // One team per row of the rectangle: its cols weights are contiguous in the segment.
  Kokkos::parallel_for(
      "Kernels::dequantize_rect", row_policy(static_cast<int>(rows)), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        dequantize_span(team, seg, table, offset + (row0 + r) * row_len + col0, n, out + r * ld_out);
      });
}

template <class T>
void dequantize_gather_rows(const QuantSegment& q, std::int64_t offset, std::int64_t row_len,
                            const std::int32_t* index, int n, std::int64_t row_start, std::int64_t row_count,
                            T* out) {
  if (n <= 0) return;
  if (q.format == QuantFormat::Gguf) {
    dequantize_gguf_gather_rows(q.payload, q.gguf_runs, q.n_runs, offset, row_len, index, n, row_start, row_count, out);
    return;
  }
  const Nf4Table table = nf4_table();
  const QuantSegment seg = q;
  const int C = static_cast<int>(row_len);
  Kokkos::parallel_for(
      "Kernels::dequantize_gather_rows", row_policy(n), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t i = team.league_rank();
        const std::int64_t row = static_cast<std::int64_t>(index[i]) - row_start;
        T* o = out + i * C;
        if (row >= 0 && row < row_count) dequantize_span(team, seg, table, offset + row * C, C, o);
        else team_for(team, C, [&](int c) { o[c] = static_cast<T>(0.0f); });
      });
}

#define MESHTRAIN_INSTANTIATE_DEQUANT(T)                                                                          \
  template void dequantize_nf4<T>(const std::uint8_t*, std::int64_t, std::int64_t, const QuantRun*, int,         \
                                  const float*, T*, std::int64_t);                                                \
  template void dequantize_int8<T>(const std::uint8_t*, std::int64_t, std::int64_t, const QuantRun*, int, T*,    \
                                   std::int64_t);                                                                 \
  template void dequantize_rect<T>(const QuantSegment&, std::int64_t, std::int64_t, std::int64_t, std::int64_t,  \
                                   std::int64_t, std::int64_t, T*, std::int64_t);                                 \
  template void dequantize_gather_rows<T>(const QuantSegment&, std::int64_t, std::int64_t, const std::int32_t*,  \
                                          int, std::int64_t, std::int64_t, T*);
MESHTRAIN_INSTANTIATE_DEQUANT(float)
MESHTRAIN_INSTANTIATE_DEQUANT(double)
MESHTRAIN_INSTANTIATE_DEQUANT(bf16)
#undef MESHTRAIN_INSTANTIATE_DEQUANT

}  // namespace meshtrain::kernels
