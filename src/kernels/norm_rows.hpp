#pragma once
/// \brief The row passes that the plain norm kernels (norms.cpp) and the fused residual +
/// norm kernels (residual_norms.cpp) share, written over a row's packs (kernel_common.hpp:
/// K elements each, C / K per row) so that one expression serves every form. Called from a
/// kernel body with its row operations `Ops` (RowOps<Warps>); every lane of a warp, or every
/// thread of a team, gets the sums.

#include "kernel_common.hpp"

namespace meshtrain::kernels::detail {

/// LayerNorm's centred second moment of a row x (C): mean over c of (x[c] - m)^2, taken after
/// the mean (two passes: no cancellation for large means).
template <class Ops, int K, class T>
KOKKOS_INLINE_FUNCTION acc_t<T> row_variance(const Member& team, int packs, const T* xr, acc_t<T> m, acc_t<T> inv_c) {
  using A = acc_t<T>;
  return Ops::template sum<A>(team, packs, [&](int p) {
           const Pack<T, K> xv = load_pack<K>(xr, p);
           return pack_sum<A, K>([&](int j) {
             const A d = load(xv.v[j]) - m;
             return d * d;
           });
         }) *
         inv_c;
}

/// LayerNorm's output row: y = (x - m) * rs * w + b.
template <class Ops, int K, class T>
KOKKOS_INLINE_FUNCTION void layernorm_output(const Member& team, int packs, const T* xr, const T* w, const T* b,
                                             acc_t<T> m, acc_t<T> rs, T* yr) {
  Ops::loop(team, packs, [&](int p) {
    const Pack<T, K> xv = load_pack<K>(xr, p), wv = load_pack<K>(w, p), bv = load_pack<K>(b, p);
    Pack<T, K> yv;
    for (int j = 0; j < K; ++j) yv.v[j] = store<T>((load(xv.v[j]) - m) * rs * load(wv.v[j]) + load(bv.v[j]));
    store_pack<K>(yr, p, yv);
  });
}

/// RMSNorm's output row: y = x * rs * w.
template <class Ops, int K, class T>
KOKKOS_INLINE_FUNCTION void rmsnorm_output(const Member& team, int packs, const T* xr, const T* w, acc_t<T> rs, T* yr) {
  Ops::loop(team, packs, [&](int p) {
    const Pack<T, K> xv = load_pack<K>(xr, p), wv = load_pack<K>(w, p);
    Pack<T, K> yv;
    for (int j = 0; j < K; ++j) yv.v[j] = store<T>(load(xv.v[j]) * rs * load(wv.v[j]));
    store_pack<K>(yr, p, yv);
  });
}

/// LayerNorm backward's two row means, with dxhat = dy * w and xhat = (x - m) * rs:
/// mean(dxhat) and mean(dxhat * xhat).
template <class A>
struct LayerNormBackwardMeans {
  A dxhat, dxhat_xhat;
};
template <class Ops, int K, class T>
KOKKOS_INLINE_FUNCTION LayerNormBackwardMeans<acc_t<T>> layernorm_backward_means(const Member& team, int packs,
                                                                                 const T* dyr, const T* w,
                                                                                 const T* xr, acc_t<T> m,
                                                                                 acc_t<T> rs, acc_t<T> inv_c) {
  using A = acc_t<T>;
  const A mean_dxhat = Ops::template sum<A>(team, packs, [&](int p) {
                         const Pack<T, K> dyv = load_pack<K>(dyr, p), wv = load_pack<K>(w, p);
                         return pack_sum<A, K>([&](int j) { return load(dyv.v[j]) * load(wv.v[j]); });
                       }) *
                       inv_c;
  const A mean_dxhat_xhat = Ops::template sum<A>(team, packs, [&](int p) {
                              const Pack<T, K> dyv = load_pack<K>(dyr, p), wv = load_pack<K>(w, p),
                                               xv = load_pack<K>(xr, p);
                              return pack_sum<A, K>([&](int j) {
                                return load(dyv.v[j]) * load(wv.v[j]) * ((load(xv.v[j]) - m) * rs);
                              });
                            }) *
                            inv_c;
  return {mean_dxhat, mean_dxhat_xhat};
}

/// RMSNorm backward's row mean, with xhat = x * rs: mean(dy * w * xhat).
template <class Ops, int K, class T>
KOKKOS_INLINE_FUNCTION acc_t<T> rmsnorm_backward_mean(const Member& team, int packs, const T* dyr, const T* w,
                                                      const T* xr, acc_t<T> rs, acc_t<T> inv_c) {
  using A = acc_t<T>;
  return Ops::template sum<A>(team, packs, [&](int p) {
           const Pack<T, K> dyv = load_pack<K>(dyr, p), wv = load_pack<K>(w, p), xv = load_pack<K>(xr, p);
           return pack_sum<A, K>(
               [&](int j) { return load(dyv.v[j]) * load(wv.v[j]) * (load(xv.v[j]) * rs); });
         }) *
         inv_c;
}

/// The norms' input gradients of one element, added to what dx holds (the residual stream's
/// gradient): LayerNorm dx += rs * (dy w - mean(dxhat) - xhat mean(dxhat xhat)), RMSNorm
/// dx += rs * (dy w - xhat mean(dxhat xhat)); xhat as above.
template <class A>
KOKKOS_FORCEINLINE_FUNCTION A layernorm_dx(A dx, A dy, A w, A x, A m, A rs, const LayerNormBackwardMeans<A>& means) {
  const A xhat = (x - m) * rs;
  return dx + rs * (dy * w - means.dxhat - xhat * means.dxhat_xhat);
}
template <class A>
KOKKOS_FORCEINLINE_FUNCTION A rmsnorm_dx(A dx, A dy, A w, A x, A rs, A mean_dxhat_xhat) {
  const A xhat = x * rs;
  return dx + rs * (dy * w - xhat * mean_dxhat_xhat);
}

}  // namespace meshtrain::kernels::detail
