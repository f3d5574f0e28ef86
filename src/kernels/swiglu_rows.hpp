#pragma once
/// \brief Private pieces of the SwiGLU kernels (elementwise.cpp): the arithmetic of one
/// element, written once, and the body of one thread of the packed GPU form.
///
/// Two forms run that arithmetic: a team per row, element by element (host builds, and GPU
/// rows that are not packable), and on GPUs one thread per 16-byte pack of a row
/// (kernel_common.hpp's packs: 8 bf16 per load instead of 1). Both call the same element
/// functions, so the forms give the same bits; host tests run the pack body over every pack
/// of a matrix and compare it with the team form bit for bit.

#include <cstdint>

#include "kernel_common.hpp"

namespace meshtrain::kernels::detail {

/// silu(g) * u = g * sigmoid(g) * u, in A.
template <class A>
KOKKOS_FORCEINLINE_FUNCTION A swiglu_value(A g, A u) {
  const A sig = A(1) / (A(1) + exp_acc(-g));
  return g * sig * u;
}

/// Gradients of silu(g) * u for the upstream gradient d.
template <class A>
struct SwigluGrads {
  A dgate;
  A dup;
};
template <class A>
KOKKOS_FORCEINLINE_FUNCTION SwigluGrads<A> swiglu_grads(A g, A u, A d) {
  const A sig = A(1) / (A(1) + exp_acc(-g));
  const A silu = g * sig;
  return {d * u * sig * (A(1) + g * (A(1) - sig)), d * silu};
}

/// Row r and pack p of flat pack index i of a (rows, packs_per_row) grid.
struct RowPack {
  std::int64_t row;
  int pack;
};
KOKKOS_FORCEINLINE_FUNCTION RowPack row_pack(std::int64_t i, int packs_per_row) {
  const std::int64_t r = i / packs_per_row;
  return {r, static_cast<int>(i - r * packs_per_row)};
}

/// \brief One thread of the packed SwiGLU forward: pack i of out (rows, cols; ld_out) from the
/// same pack of gate and up (rows, cols; ld_in), packs_per_row = cols / K. K > 1 needs
/// rows_in_packs(cols, sizeof(T), {ld_in, ld_out}, {gate, up, out}).
template <int K, class T>
KOKKOS_FORCEINLINE_FUNCTION void swiglu_forward_pack(const T* gate, const T* up, int ld_in, T* out, int ld_out,
                                                     int packs_per_row, std::int64_t i) {
  using A = acc_t<T>;
  const RowPack rp = row_pack(i, packs_per_row);
  const Pack<T, K> g = load_pack<K>(gate + rp.row * ld_in, rp.pack);
  const Pack<T, K> u = load_pack<K>(up + rp.row * ld_in, rp.pack);
  Pack<T, K> o;
  for (int j = 0; j < K; ++j) o.v[j] = store<T>(swiglu_value<A>(load(g.v[j]), load(u.v[j])));
  store_pack<K>(out + rp.row * ld_out, rp.pack, o);
}

/// \brief One thread of the packed SwiGLU backward: pack i of dgate and dup (rows, cols;
/// ld_in) from gate, up (ld_in) and dout (ld_out). The whole pack is read before either
/// output is written, so dgate/dup may be gate/up themselves.
template <int K, class T>
KOKKOS_FORCEINLINE_FUNCTION void swiglu_backward_pack(const T* gate, const T* up, int ld_in, const T* dout,
                                                      int ld_out, T* dgate, T* dup, int packs_per_row,
                                                      std::int64_t i) {
  using A = acc_t<T>;
  const RowPack rp = row_pack(i, packs_per_row);
  const Pack<T, K> g = load_pack<K>(gate + rp.row * ld_in, rp.pack);
  const Pack<T, K> u = load_pack<K>(up + rp.row * ld_in, rp.pack);
  const Pack<T, K> d = load_pack<K>(dout + rp.row * ld_out, rp.pack);
  Pack<T, K> dg, du;
  for (int j = 0; j < K; ++j) {
    const SwigluGrads<A> gr = swiglu_grads<A>(load(g.v[j]), load(u.v[j]), load(d.v[j]));
    dg.v[j] = store<T>(gr.dgate);
    du.v[j] = store<T>(gr.dup);
  }
  store_pack<K>(dgate + rp.row * ld_in, rp.pack, dg);
  store_pack<K>(dup + rp.row * ld_in, rp.pack, du);
}

/// Whether the packed GPU form runs for these operands (never on host builds, whose row
/// loops vectorize as they are).
template <class T>
inline bool swiglu_rows_packable(int cols, int ld_in, int ld_out, std::initializer_list<const void*> bases) {
  return !kHostExec && rows_in_packs(cols, sizeof(T), {ld_in, ld_out}, bases);
}

}  // namespace meshtrain::kernels::detail
