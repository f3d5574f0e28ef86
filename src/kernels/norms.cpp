#include "kernels/norms.hpp"

#include "kernel_common.hpp"
#include "norm_rows.hpp"

namespace meshtrain::kernels {
using namespace detail;

namespace {

// One body per kernel for every form (NormForm): RowOps<false> a team per row, RowOps<true>
// a warp per row; K the pack width (kernel_common.hpp's packs: 16 bytes in the Warps form
// where the rows allow it, else 1). Loops run over a row's C / K packs.

template <bool Warps, int K, class T>
void layernorm_forward_kernel(const T* x, const T* w, const T* b, double eps, int N, int C, T* y, acc_t<T>* mean,
                              acc_t<T>* rstd) {
  // x, y: (N, C); w, b: (C); mean, rstd: (N)
  using A = acc_t<T>;
  using Ops = RowOps<Warps>;
  using P = Pack<T, K>;
  const A eps_a = static_cast<A>(eps);
  const A inv_c = A(1) / static_cast<A>(C);
  const int packs = C / K;
  Kokkos::parallel_for(
      Warps ? (K > 1 ? "Kernels::layernorm_forward_warps16" : "Kernels::layernorm_forward_warps")
            : "Kernels::layernorm_forward",
      Ops::policy(N), KOKKOS_LAMBDA(const Member& team) {
        const int r = Ops::unit(team);
        if (r >= N) return;
        const T* xr = x + static_cast<std::int64_t>(r) * C;
        T* yr = y + static_cast<std::int64_t>(r) * C;
        // Two passes (mean, then centred second moment): no cancellation for large means.
        const A m = Ops::template sum<A>(team, packs, [&](int p) {
                      const P xv = load_pack<K>(xr, p);
                      return pack_sum<A, K>([&](int j) { return load(xv.v[j]); });
                    }) * inv_c;
        const A var = row_variance<Ops, K>(team, packs, xr, m, inv_c);
        const A rs = A(1) / math::sqrt(var + eps_a);
        layernorm_output<Ops, K>(team, packs, xr, w, b, m, rs, yr);
        Ops::single(team, [&]() {
          mean[r] = m;
          rstd[r] = rs;
        });
      });
}

template <bool Warps, int K, class T>
void layernorm_backward_kernel(const T* dy, const T* x, const T* w, const acc_t<T>* mean, const acc_t<T>* rstd, int N,
                               int C, T* dx, acc_t<T>* dw, acc_t<T>* db) {
  // dy, x, dx: (N, C); w, dw, db: (C); mean, rstd: (N)
  using A = acc_t<T>;
  using Ops = RowOps<Warps>;
  using P = Pack<T, K>;
  // Parameter gradients: column sums in row order (deterministic, no atomics); skipped for
  // frozen parameters (dw == db == nullptr).
  if (dw != nullptr && db != nullptr) column_sums<A, 2>(
      "Kernels::layernorm_backward_params", N, C,
      KOKKOS_LAMBDA(int r, int c, A* v) {
        const std::int64_t i = static_cast<std::int64_t>(r) * C + c;
        const A g = load(dy[i]);
        v[0] = g * (load(x[i]) - mean[r]) * rstd[r];
        v[1] = g;
      },
      KOKKOS_LAMBDA(int c, const A* s) {
        dw[c] += s[0];
        db[c] += s[1];
      });
  const A inv_c = A(1) / static_cast<A>(C);
  const int packs = C / K;
  Kokkos::parallel_for(
      Warps ? (K > 1 ? "Kernels::layernorm_backward_warps16" : "Kernels::layernorm_backward_warps")
            : "Kernels::layernorm_backward",
      Ops::policy(N), KOKKOS_LAMBDA(const Member& team) {
        const int r = Ops::unit(team);
        if (r >= N) return;
        const T* dyr = dy + static_cast<std::int64_t>(r) * C;
        const T* xr = x + static_cast<std::int64_t>(r) * C;
        T* dxr = dx + static_cast<std::int64_t>(r) * C;
        const A m = mean[r];
        const A rs = rstd[r];
        const LayerNormBackwardMeans<A> means =
            layernorm_backward_means<Ops, K>(team, packs, dyr, w, xr, m, rs, inv_c);
        Ops::loop(team, packs, [&](int p) {
          const P dyv = load_pack<K>(dyr, p), wv = load_pack<K>(w, p), xv = load_pack<K>(xr, p);
          P dxv = load_pack<K>(dxr, p);
          for (int j = 0; j < K; ++j)
            dxv.v[j] = store<T>(
                layernorm_dx(load(dxv.v[j]), load(dyv.v[j]), load(wv.v[j]), load(xv.v[j]), m, rs, means));
          store_pack<K>(dxr, p, dxv);
        });
      });
}

template <bool Warps, int K, class T>
void rmsnorm_forward_kernel(const T* x, const T* w, double eps, int N, int C, T* y, acc_t<T>* rstd) {
  // x, y: (N, C); w: (C); rstd: (N)
  using A = acc_t<T>;
  using Ops = RowOps<Warps>;
  using P = Pack<T, K>;
  const A eps_a = static_cast<A>(eps);
  const A inv_c = A(1) / static_cast<A>(C);
  const int packs = C / K;
  Kokkos::parallel_for(
      Warps ? (K > 1 ? "Kernels::rmsnorm_forward_warps16" : "Kernels::rmsnorm_forward_warps")
            : "Kernels::rmsnorm_forward",
      Ops::policy(N), KOKKOS_LAMBDA(const Member& team) {
        const int r = Ops::unit(team);
        if (r >= N) return;
        const T* xr = x + static_cast<std::int64_t>(r) * C;
        T* yr = y + static_cast<std::int64_t>(r) * C;
        const A ms = Ops::template sum<A>(team, packs, [&](int p) {
                       const P xv = load_pack<K>(xr, p);
                       return pack_sum<A, K>([&](int j) {
                         const A v = load(xv.v[j]);
                         return v * v;
                       });
                     }) * inv_c;
        const A rs = A(1) / math::sqrt(ms + eps_a);
        rmsnorm_output<Ops, K>(team, packs, xr, w, rs, yr);
        Ops::single(team, [&]() { rstd[r] = rs; });
      });
}

template <bool Warps, int K, class T>
void rmsnorm_backward_kernel(const T* dy, const T* x, const T* w, const acc_t<T>* rstd, int N, int C, T* dx,
                             acc_t<T>* dw) {
  // dy, x, dx: (N, C); w, dw: (C); rstd: (N)
  using A = acc_t<T>;
  using Ops = RowOps<Warps>;
  using P = Pack<T, K>;
  if (dw != nullptr) column_sums<A, 1>(  // dw == nullptr: a frozen weight
      "Kernels::rmsnorm_backward_params", N, C,
      KOKKOS_LAMBDA(int r, int c, A* v) {
        const std::int64_t i = static_cast<std::int64_t>(r) * C + c;
        v[0] = load(dy[i]) * load(x[i]) * rstd[r];
      },
      KOKKOS_LAMBDA(int c, const A* s) { dw[c] += s[0]; });
  const A inv_c = A(1) / static_cast<A>(C);
  const int packs = C / K;
  Kokkos::parallel_for(
      Warps ? (K > 1 ? "Kernels::rmsnorm_backward_warps16" : "Kernels::rmsnorm_backward_warps")
            : "Kernels::rmsnorm_backward",
      Ops::policy(N), KOKKOS_LAMBDA(const Member& team) {
        const int r = Ops::unit(team);
        if (r >= N) return;
        const T* dyr = dy + static_cast<std::int64_t>(r) * C;
        const T* xr = x + static_cast<std::int64_t>(r) * C;
        T* dxr = dx + static_cast<std::int64_t>(r) * C;
        const A rs = rstd[r];
        const A mean_dxhat_xhat = rmsnorm_backward_mean<Ops, K>(team, packs, dyr, w, xr, rs, inv_c);
        Ops::loop(team, packs, [&](int p) {
          const P dyv = load_pack<K>(dyr, p), wv = load_pack<K>(w, p), xv = load_pack<K>(xr, p);
          P dxv = load_pack<K>(dxr, p);
          for (int j = 0; j < K; ++j)
            dxv.v[j] = store<T>(
                rmsnorm_dx(load(dxv.v[j]), load(dyv.v[j]), load(wv.v[j]), load(xv.v[j]), rs, mean_dxhat_xhat));
          store_pack<K>(dxr, p, dxv);
        });
      });
}

}  // namespace

NormForm default_norm_form() { return kHostExec ? NormForm::Rows : NormForm::Warps; }

bool norm_rows_packable(int C, std::size_t elem_bytes, std::initializer_list<const void*> bases) {
  static_assert(kNormPackBytes == 16, "rows_in_packs checks 16-byte packs");
  return rows_in_packs(C, elem_bytes, {}, bases);  // contiguous rows: the row is its own stride
}

template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, double eps, int N, int C, T* y, acc_t<T>* mean,
                       acc_t<T>* rstd, NormForm form, bool row_packs) {
  if (form == NormForm::Rows) layernorm_forward_kernel<false, 1>(x, w, b, eps, N, C, y, mean, rstd);
  else if (row_packs && norm_rows_packable(C, sizeof(T), {x, w, b, y}))
    layernorm_forward_kernel<true, kPackWidth<T>>(x, w, b, eps, N, C, y, mean, rstd);
  else layernorm_forward_kernel<true, 1>(x, w, b, eps, N, C, y, mean, rstd);
}

template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* mean, const acc_t<T>* rstd, int N, int C,
                        T* dx, acc_t<T>* dw, acc_t<T>* db, NormForm form, bool row_packs) {
  if (form == NormForm::Rows) layernorm_backward_kernel<false, 1>(dy, x, w, mean, rstd, N, C, dx, dw, db);
  else if (row_packs && norm_rows_packable(C, sizeof(T), {dy, x, w, dx}))
    layernorm_backward_kernel<true, kPackWidth<T>>(dy, x, w, mean, rstd, N, C, dx, dw, db);
  else layernorm_backward_kernel<true, 1>(dy, x, w, mean, rstd, N, C, dx, dw, db);
}

template <class T>
void rmsnorm_forward(const T* x, const T* w, double eps, int N, int C, T* y, acc_t<T>* rstd, NormForm form,
                     bool row_packs) {
  if (form == NormForm::Rows) rmsnorm_forward_kernel<false, 1>(x, w, eps, N, C, y, rstd);
  else if (row_packs && norm_rows_packable(C, sizeof(T), {x, w, y}))
    rmsnorm_forward_kernel<true, kPackWidth<T>>(x, w, eps, N, C, y, rstd);
  else rmsnorm_forward_kernel<true, 1>(x, w, eps, N, C, y, rstd);
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* rstd, int N, int C, T* dx, acc_t<T>* dw,
                      NormForm form, bool row_packs) {
  if (form == NormForm::Rows) rmsnorm_backward_kernel<false, 1>(dy, x, w, rstd, N, C, dx, dw);
  else if (row_packs && norm_rows_packable(C, sizeof(T), {dy, x, w, dx}))
    rmsnorm_backward_kernel<true, kPackWidth<T>>(dy, x, w, rstd, N, C, dx, dw);
  else rmsnorm_backward_kernel<true, 1>(dy, x, w, rstd, N, C, dx, dw);
}

#define MESHTRAIN_INSTANTIATE_NORMS(T)                                                                        \
  template void layernorm_forward<T>(const T*, const T*, const T*, double, int, int, T*, acc_t<T>*, acc_t<T>*, \
                                     NormForm, bool);                                                               \
  template void layernorm_backward<T>(const T*, const T*, const T*, const acc_t<T>*, const acc_t<T>*, int,    \
                                      int, T*, acc_t<T>*, acc_t<T>*, NormForm, bool);                                \
  template void rmsnorm_forward<T>(const T*, const T*, double, int, int, T*, acc_t<T>*, NormForm, bool);            \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const acc_t<T>*, int, int, T*, acc_t<T>*,   \
                                    NormForm, bool);
MESHTRAIN_INSTANTIATE_NORMS(float)
MESHTRAIN_INSTANTIATE_NORMS(double)
MESHTRAIN_INSTANTIATE_NORMS(bf16)
#undef MESHTRAIN_INSTANTIATE_NORMS

}  // namespace meshtrain::kernels
