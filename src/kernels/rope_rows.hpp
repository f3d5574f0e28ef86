#pragma once
/// \brief Private pieces of the RoPE kernels (rope.cpp): the rotation of one pair, written
/// once, and the body of one thread of the packed GPU form.
///
/// Two forms run the rotation: a team per row, pair by pair (host builds, and GPU rows that
/// are not packable), and on GPUs one thread per 16-byte pack of a head's first half with
/// the matching pack of its second half (kernel_common.hpp's packs: 8 bf16 per load). Both
/// call rope_rotate, so they give the same bits; host tests run the pack body over every
/// pack and compare it with the team form bit for bit.

#include <cstdint>

#include "kernel_common.hpp"

namespace meshtrain::kernels::detail {

/// The pair (x1, x2) = (x[i], x[i + head_dim/2]) rotated by +angle (Forward; Hugging Face:
/// q * cos + rotate_half(q) * sin, rotate_half(q) = cat(-q2, q1)) or by -angle (the
/// transpose, for the gradient).
template <bool Forward, class A>
KOKKOS_FORCEINLINE_FUNCTION void rope_rotate(A x1, A x2, A c, A s, A& y1, A& y2) {
  if constexpr (Forward) {
    y1 = x1 * c - x2 * s;
    y2 = x2 * c + x1 * s;
  } else {
    y1 = x1 * c + x2 * s;
    y2 = x2 * c - x1 * s;
  }
}

/// Position of row r of a (B * T_seq)-row batch: r % T_seq, counted from each document's
/// first row in packed rows (doc_start).
KOKKOS_FORCEINLINE_FUNCTION int rope_position(std::int64_t r, int T_seq, const std::int32_t* doc_start) {
  return static_cast<int>(r % T_seq) - (doc_start != nullptr ? doc_start[r] : 0);
}

/// Pack q of K floats of a table row: one or two 16-byte loads where K floats are whole
/// 16-byte units, element by element otherwise (double rows: K = 2).
template <int K>
KOKKOS_FORCEINLINE_FUNCTION Pack<float, K> load_table_pack(const float* row, int q) {
  if constexpr (K * sizeof(float) % 16 == 0) {
    return load_pack<K>(row, q);
  } else {
    Pack<float, K> out;
    for (int j = 0; j < K; ++j) out.v[j] = row[q * K + j];
    return out;
  }
}

/// \brief One thread of the packed RoPE: flat index i of the (rows, n_heads, half / K) grid
/// rotates pack q of head h's first half with pack q of its second half, in place; the
/// tables are (positions, half) floats. K > 1 needs rope_rows_in_packs.
template <bool Forward, int K, class T>
KOKKOS_FORCEINLINE_FUNCTION void rope_pack(T* x, int ld, int T_seq, int n_heads, int half, const float* cos_table,
                                           const float* sin_table, const std::int32_t* doc_start, std::int64_t i) {
  using A = acc_t<T>;
  const int packs_per_half = half / K;
  const std::int64_t rh = i / packs_per_half;
  const int q = static_cast<int>(i - rh * packs_per_half);
  const std::int64_t r = rh / n_heads;
  const int h = static_cast<int>(rh - r * n_heads);
  const std::int64_t pos = rope_position(r, T_seq, doc_start);
  T* first = x + r * ld + static_cast<std::int64_t>(h) * 2 * half;
  Pack<T, K> a = load_pack<K>(first, q);
  Pack<T, K> b = load_pack<K>(first + half, q);
  const Pack<float, K> c = load_table_pack<K>(cos_table + pos * half, q);
  const Pack<float, K> s = load_table_pack<K>(sin_table + pos * half, q);
  for (int j = 0; j < K; ++j) {
    A y1, y2;
    rope_rotate<Forward, A>(load(a.v[j]), load(b.v[j]), static_cast<A>(c.v[j]), static_cast<A>(s.v[j]), y1, y2);
    a.v[j] = store<T>(y1);
    b.v[j] = store<T>(y2);
  }
  store_pack<K>(first, q, a);
  store_pack<K>(first + half, q, b);
}

/// Whether every pack the packed form touches starts on 16 bytes: a head's half a whole
/// number of packs, the row stride a whole number of 16-byte units, x aligned, and the
/// tables' rows (half floats) and bases on 16 bytes.
template <class T>
inline bool rope_rows_in_packs(const T* x, int ld, int head_dim, const float* cos_table, const float* sin_table) {
  const int half = head_dim / 2;
  return head_dim % 2 == 0 && rows_in_packs(half, sizeof(T), {ld}, {x}) &&
         rows_in_packs(half, sizeof(float), {}, {cos_table, sin_table});
}
/// Whether the packed GPU form runs (never on host builds).
template <class T>
inline bool rope_rows_packable(const T* x, int ld, int head_dim, const float* cos_table, const float* sin_table) {
  return !kHostExec && rope_rows_in_packs(x, ld, head_dim, cos_table, sin_table);
}

}  // namespace meshtrain::kernels::detail
