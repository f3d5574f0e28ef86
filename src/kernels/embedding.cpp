#include "meshtrain/kernels/embedding.hpp"

#include "kernel_common.hpp"

namespace meshtrain::kernels {
using namespace detail;

template <class T>
void embedding_forward(const std::int32_t* tokens, int n_tokens, const T* wte,
                       std::int64_t vocab_start, std::int64_t vocab_local, int C, T* out) {
  // tokens: (n_tokens), wte: (vocab_local, C) -> out: (n_tokens, C)
  Kokkos::parallel_for(
      "Kernels::embedding_forward", row_policy(n_tokens), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t i = team.league_rank();
        const std::int64_t row = static_cast<std::int64_t>(tokens[i]) - vocab_start;
        T* o = out + i * C;
        if (row >= 0 && row < vocab_local) {
          const T* w = wte + row * C;
          team_for(team, C, [&](int c) { o[c] = w[c]; });
        } else {
          team_for(team, C, [&](int c) { o[c] = store<T>(acc_t<T>(0)); });
        }
      });
}

template <class T>
void embedding_backward(const std::int32_t* tokens, int n_tokens, const T* dout,
                        std::int64_t vocab_start, std::int64_t vocab_local, int C, T* dwte) {
  // dout: (n_tokens, C) -> dwte: (vocab_local, C) +=
  // Parallel over column blocks, serial over tokens: every element of dwte receives its
  // contributions in token order, whatever the blocking or thread count, and no two work
  // items touch the same element (no atomics).
  const int CB = column_block(C, C);
  const int nblocks = (C + CB - 1) / CB;
  Kokkos::parallel_for(
      "Kernels::embedding_backward", RangeInt(0, nblocks), KOKKOS_LAMBDA(int blk) {
        const int c0 = blk * CB;
        const int nc = C - c0 < CB ? C - c0 : CB;
        for (int i = 0; i < n_tokens; ++i) {
          const std::int64_t row = static_cast<std::int64_t>(tokens[i]) - vocab_start;
          if (row < 0 || row >= vocab_local) continue;
          T* w = dwte + row * C + c0;
          const T* d = dout + static_cast<std::int64_t>(i) * C + c0;
          for (int j = 0; j < nc; ++j) w[j] = store<T>(load(w[j]) + load(d[j]));
        }
      });
}

template <class T>
void add_position_embedding(T* x, const T* wpe, int B, int T_seq, int C) {
  // x: (B, T_seq, C) += wpe[t]: (max_seq_len, C)
  Kokkos::parallel_for(
      "Kernels::add_position_embedding", row_policy(B * T_seq), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank();
        T* xr = x + static_cast<std::int64_t>(r) * C;
        const T* w = wpe + static_cast<std::int64_t>(r % T_seq) * C;
        team_for(team, C, [&](int c) { xr[c] = store<T>(load(xr[c]) + load(w[c])); });
      });
}

template <class T>
void position_embedding_backward(const T* dx, T* dwpe, int B, int T_seq, int C) {
  // dx: (B, T_seq*C) viewed as B rows of T_seq*C columns -> dwpe (T_seq*C) += column sums.
  using A = acc_t<T>;
  const std::int64_t row_stride = static_cast<std::int64_t>(T_seq) * C;
  column_sums<A, 1>(
      "Kernels::position_embedding_backward", B, T_seq * C,
      KOKKOS_LAMBDA(int b, int tc, A* v) { v[0] = load(dx[b * row_stride + tc]); },
      KOKKOS_LAMBDA(int tc, const A* s) { dwpe[tc] = store<T>(load(dwpe[tc]) + s[0]); });
}

#define MESHTRAIN_INSTANTIATE_EMBEDDING(T)                                                       \
  template void embedding_forward<T>(const std::int32_t*, int, const T*, std::int64_t,           \
                                     std::int64_t, int, T*);                                     \
  template void embedding_backward<T>(const std::int32_t*, int, const T*, std::int64_t,          \
                                      std::int64_t, int, T*);                                    \
  template void add_position_embedding<T>(T*, const T*, int, int, int);                          \
  template void position_embedding_backward<T>(const T*, T*, int, int, int);
MESHTRAIN_INSTANTIATE_EMBEDDING(float)
MESHTRAIN_INSTANTIATE_EMBEDDING(double)
MESHTRAIN_INSTANTIATE_EMBEDDING(bf16)
#undef MESHTRAIN_INSTANTIATE_EMBEDDING

}  // namespace meshtrain::kernels
