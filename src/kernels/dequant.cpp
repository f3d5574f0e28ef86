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

}  // namespace

template <class T>
void dequantize_nf4(const std::uint8_t* payload, std::int64_t payload_stride, std::int64_t shard_numel,
                    const QuantRun* runs, int n_runs, const float* group_max, T* out, std::int64_t numel) {
  Nf4Table table{};
  for (int i = 0; i < 16; ++i) table.v[i] = formats::nf4::kCodes[i];
  const std::int64_t shard_blocks = shard_numel / kBlock;
  // One iteration per 64-weight block: its run, scale and group maximum once, then 32 bytes.
  Kokkos::parallel_for(
      "Kernels::dequantize_nf4", Range64(0, numel / kBlock), KOKKOS_LAMBDA(std::int64_t lb) {
        T* o = out + lb * kBlock;
        const int r = find_run(runs, n_runs, lb);
        if (r < 0) {
          for (int i = 0; i < kBlock; ++i) o[i] = static_cast<T>(0.0f);
          return;
        }
        const std::int64_t s = lb / shard_blocks, kb = lb - s * shard_blocks;  // shard, block within it
        const std::uint8_t* codes = payload + s * payload_stride + kb * (kBlock / 2);
        const std::uint8_t scale = payload[s * payload_stride + shard_numel / 2 + kb];
        const std::int64_t gb = runs[r].global_block + (lb - runs[r].local_block);
        const float top = group_max[runs[r].group_base + gb / kGroup];
        const float absmax = static_cast<float>(scale) * (top / 255.0f);  // formats::nf4::block_scale
        for (int i = 0; i < kBlock / 2; ++i) {
          const std::uint8_t byte = codes[i];
          o[2 * i] = static_cast<T>(table.v[byte >> 4] * absmax);
          o[2 * i + 1] = static_cast<T>(table.v[byte & 0x0F] * absmax);
        }
      });
}

template <class T>
void dequantize_int8(const std::uint8_t* payload, std::int64_t payload_stride, std::int64_t shard_numel,
                     const QuantRun* runs, int n_runs, T* out, std::int64_t numel) {
  const std::int64_t shard_blocks = shard_numel / kBlock;
  Kokkos::parallel_for(
      "Kernels::dequantize_int8", Range64(0, numel / kBlock), KOKKOS_LAMBDA(std::int64_t lb) {
        T* o = out + lb * kBlock;
        if (find_run(runs, n_runs, lb) < 0) {
          for (int i = 0; i < kBlock; ++i) o[i] = static_cast<T>(0.0f);
          return;
        }
        const std::int64_t s = lb / shard_blocks, kb = lb - s * shard_blocks;
        const std::uint8_t* shard = payload + s * payload_stride;
        const auto* codes = reinterpret_cast<const std::int8_t*>(shard) + kb * kBlock;
        // The absmax array starts at byte shard_numel (a multiple of 64) of a 4-aligned stride.
        const float absmax = reinterpret_cast<const float*>(shard + shard_numel)[kb];
        const float step = absmax / 127.0f;  // formats::int8_blocks::dequantize
        for (int i = 0; i < kBlock; ++i) o[i] = static_cast<T>(static_cast<float>(codes[i]) * step);
      });
}

template void dequantize_nf4<float>(const std::uint8_t*, std::int64_t, std::int64_t, const QuantRun*, int,
                                    const float*, float*, std::int64_t);
template void dequantize_nf4<bf16>(const std::uint8_t*, std::int64_t, std::int64_t, const QuantRun*, int,
                                   const float*, bf16*, std::int64_t);
template void dequantize_int8<float>(const std::uint8_t*, std::int64_t, std::int64_t, const QuantRun*, int, float*,
                                     std::int64_t);
template void dequantize_int8<bf16>(const std::uint8_t*, std::int64_t, std::int64_t, const QuantRun*, int, bf16*,
                                    std::int64_t);

}  // namespace meshtrain::kernels
