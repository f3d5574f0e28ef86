#include "kernels/rope.hpp"

#include <cmath>
#include <vector>

#include "kernel_common.hpp"
#include "rope_rows.hpp"

namespace meshtrain::kernels {
using namespace detail;

void rope_tables(double theta, int head_dim, int max_seq_len, float* cos_table, float* sin_table) {
  // cos_table, sin_table: (max_seq_len, head_dim/2). Same fp32 operations as Hugging Face:
  //   inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
  //   freqs    = position.float() * inv_freq;  cos = freqs.cos(), sin = freqs.sin()
  // Computed once on the host and copied: device powf/cosf may differ from the host's by an
  // ulp, and at position 4095 one ulp of inv_freq moves the angle by ~5e-4 rad, so host
  // tables keep CPU and GPU builds (and the PyTorch reference) on the same angles.
  const int half = head_dim / 2;
  const float base = static_cast<float>(theta);
  const float dim = static_cast<float>(head_dim);
  const std::size_t n = static_cast<std::size_t>(max_seq_len) * half;
  std::vector<float> c(n), s(n);
  for (int pos = 0; pos < max_seq_len; ++pos)
    for (int i = 0; i < half; ++i) {
      const float inv_freq = 1.0f / std::pow(base, static_cast<float>(2 * i) / dim);
      const float angle = static_cast<float>(pos) * inv_freq;
      c[static_cast<std::size_t>(pos) * half + i] = std::cos(angle);
      s[static_cast<std::size_t>(pos) * half + i] = std::sin(angle);
    }
  using HostView = Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using DevView = Kokkos::View<float*, Kokkos::DefaultExecutionSpace::memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::deep_copy(DevView(cos_table, n), HostView(c.data(), n));
  Kokkos::deep_copy(DevView(sin_table, n), HostView(s.data(), n));
}

namespace {

/// The packed GPU form (rope_rows.hpp): one thread per pack of a head's half. A separate
/// function, not a lambda under `if constexpr` (nvcc's extended lambdas).
template <bool Forward, int K, class T>
void rope_apply_packs(const char* name, T* x, int ld, int B, int T_seq, int n_heads, int half,
                      const float* cos_table, const float* sin_table, const std::int32_t* doc_start) {
  const std::int64_t n = static_cast<std::int64_t>(B) * T_seq * n_heads * (half / K);
  Kokkos::parallel_for(
      name, Range64(0, n), KOKKOS_LAMBDA(std::int64_t i) {
        rope_pack<Forward, K>(x, ld, T_seq, n_heads, half, cos_table, sin_table, doc_start, i);
      });
}

/// Rotates the pairs (i, i + hd/2) of every head of every row by +angle (Forward) or
/// -angle (the transpose, for the gradient).
template <bool Forward, class T>
void rope_apply(const char* name, const char* packs_name, T* x, int ld, int B, int T_seq, int n_heads,
                int head_dim, const float* cos_table, const float* sin_table, const std::int32_t* doc_start,
                bool row_packs) {
  using A = acc_t<T>;
  const int half = head_dim / 2;
  if (row_packs && rope_rows_packable(x, ld, head_dim, cos_table, sin_table)) {
    rope_apply_packs<Forward, kPackWidth<T>>(packs_name, x, ld, B, T_seq, n_heads, half, cos_table, sin_table,
                                             doc_start);
    return;
  }
  Kokkos::parallel_for(
      name, row_policy(B * T_seq), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank();
        T* xr = x + static_cast<std::int64_t>(r) * ld;
        // Packed rows: positions restart at each document, as if the document were alone.
        const int pos = rope_position(r, T_seq, doc_start);
        const float* cr = cos_table + static_cast<std::int64_t>(pos) * half;
        const float* sr = sin_table + static_cast<std::int64_t>(pos) * half;
        team_for2(team, n_heads, half, [&](int h, int i) {
          T* p = xr + h * head_dim + i;
          A y1, y2;
          rope_rotate<Forward, A>(load(p[0]), load(p[half]), static_cast<A>(cr[i]), static_cast<A>(sr[i]), y1, y2);
          p[0] = store<T>(y1);
          p[half] = store<T>(y2);
        });
      });
}

}  // namespace

template <class T>
void rope_forward(T* x, int ld, int B, int T_seq, int n_heads, int head_dim, const float* cos_table,
                  const float* sin_table, const std::int32_t* doc_start, bool row_packs) {
  rope_apply<true>("Kernels::rope_forward", "Kernels::rope_forward_packs", x, ld, B, T_seq, n_heads, head_dim,
                   cos_table, sin_table, doc_start, row_packs);
}

template <class T>
void rope_backward(T* dx, int ld, int B, int T_seq, int n_heads, int head_dim, const float* cos_table,
                   const float* sin_table, const std::int32_t* doc_start, bool row_packs) {
  rope_apply<false>("Kernels::rope_backward", "Kernels::rope_backward_packs", dx, ld, B, T_seq, n_heads, head_dim,
                    cos_table, sin_table, doc_start, row_packs);
}

#define MESHTRAIN_INSTANTIATE_ROPE(T)                                                      \
  template void rope_forward<T>(T*, int, int, int, int, int, const float*, const float*, const std::int32_t*, bool); \
  template void rope_backward<T>(T*, int, int, int, int, int, const float*, const float*, const std::int32_t*, bool);
MESHTRAIN_INSTANTIATE_ROPE(float)
MESHTRAIN_INSTANTIATE_ROPE(double)
MESHTRAIN_INSTANTIATE_ROPE(bf16)
#undef MESHTRAIN_INSTANTIATE_ROPE

}  // namespace meshtrain::kernels
