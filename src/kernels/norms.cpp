#include "kernels/norms.hpp"

#include "kernel_common.hpp"

namespace meshtrain::kernels {
using namespace detail;

template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, double eps, int N, int C, T* y,
                       acc_t<T>* mean, acc_t<T>* rstd) {
  // x, y: (N, C); w, b: (C); mean, rstd: (N)
  using A = acc_t<T>;
  const A eps_a = static_cast<A>(eps);
  const A inv_c = A(1) / static_cast<A>(C);
  Kokkos::parallel_for(
      "Kernels::layernorm_forward", row_policy(N), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const T* xr = x + r * C;
        T* yr = y + r * C;
        // Two passes (mean, then centred second moment): no cancellation for large means.
        const A m = team_sum<A>(team, C, [&](int c) { return load(xr[c]); }) * inv_c;
        const A var = team_sum<A>(team, C, [&](int c) {
                        const A d = load(xr[c]) - m;
                        return d * d;
                      }) * inv_c;
        const A rs = A(1) / math::sqrt(var + eps_a);
        team_for(team, C, [&](int c) {
          yr[c] = store<T>((load(xr[c]) - m) * rs * load(w[c]) + load(b[c]));
        });
        team_single(team, [&]() {
          mean[r] = m;
          rstd[r] = rs;
        });
      });
}

template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* mean,
                        const acc_t<T>* rstd, int N, int C, T* dx, acc_t<T>* dw, acc_t<T>* db) {
  // dy, x, dx: (N, C); w, dw, db: (C); mean, rstd: (N)
  using A = acc_t<T>;
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
  Kokkos::parallel_for(
      "Kernels::layernorm_backward", row_policy(N), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const T* dyr = dy + r * C;
        const T* xr = x + r * C;
        T* dxr = dx + r * C;
        const A m = mean[r];
        const A rs = rstd[r];
        // dxhat = dy * w;  dx += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        const A mean_dxhat =
            team_sum<A>(team, C, [&](int c) { return load(dyr[c]) * load(w[c]); }) * inv_c;
        const A mean_dxhat_xhat = team_sum<A>(team, C, [&](int c) {
                                    return load(dyr[c]) * load(w[c]) * ((load(xr[c]) - m) * rs);
                                  }) * inv_c;
        team_for(team, C, [&](int c) {
          const A xhat = (load(xr[c]) - m) * rs;
          const A dxhat = load(dyr[c]) * load(w[c]);
          dxr[c] = store<T>(load(dxr[c]) + rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
        });
      });
}

template <class T>
void rmsnorm_forward(const T* x, const T* w, double eps, int N, int C, T* y, acc_t<T>* rstd) {
  // x, y: (N, C); w: (C); rstd: (N)
  using A = acc_t<T>;
  const A eps_a = static_cast<A>(eps);
  const A inv_c = A(1) / static_cast<A>(C);
  Kokkos::parallel_for(
      "Kernels::rmsnorm_forward", row_policy(N), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const T* xr = x + r * C;
        T* yr = y + r * C;
        const A ms = team_sum<A>(team, C, [&](int c) {
                       const A v = load(xr[c]);
                       return v * v;
                     }) * inv_c;
        const A rs = A(1) / math::sqrt(ms + eps_a);
        team_for(team, C, [&](int c) { yr[c] = store<T>(load(xr[c]) * rs * load(w[c])); });
        team_single(team, [&]() { rstd[r] = rs; });
      });
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* rstd, int N, int C,
                      T* dx, acc_t<T>* dw) {
  using A = acc_t<T>;
  if (dw != nullptr) column_sums<A, 1>(  // dw == nullptr: a frozen weight
      "Kernels::rmsnorm_backward_params", N, C,
      KOKKOS_LAMBDA(int r, int c, A* v) {
        const std::int64_t i = static_cast<std::int64_t>(r) * C + c;
        v[0] = load(dy[i]) * load(x[i]) * rstd[r];
      },
      KOKKOS_LAMBDA(int c, const A* s) { dw[c] += s[0]; });
  const A inv_c = A(1) / static_cast<A>(C);
  Kokkos::parallel_for(
      "Kernels::rmsnorm_backward", row_policy(N), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const T* dyr = dy + r * C;
        const T* xr = x + r * C;
        T* dxr = dx + r * C;
        const A rs = rstd[r];
        // xhat = x * rstd; dxhat = dy * w;  dx += rstd * (dxhat - xhat * mean(dxhat * xhat))
        const A mean_dxhat_xhat = team_sum<A>(team, C, [&](int c) {
                                    return load(dyr[c]) * load(w[c]) * (load(xr[c]) * rs);
                                  }) * inv_c;
        team_for(team, C, [&](int c) {
          const A xhat = load(xr[c]) * rs;
          const A dxhat = load(dyr[c]) * load(w[c]);
          dxr[c] = store<T>(load(dxr[c]) + rs * (dxhat - xhat * mean_dxhat_xhat));
        });
      });
}

#define MESHTRAIN_INSTANTIATE_NORMS(T)                                                          \
  template void layernorm_forward<T>(const T*, const T*, const T*, double, int, int, T*,       \
                                     acc_t<T>*, acc_t<T>*);                                    \
  template void layernorm_backward<T>(const T*, const T*, const T*, const acc_t<T>*,           \
                                      const acc_t<T>*, int, int, T*, acc_t<T>*, acc_t<T>*);    \
  template void rmsnorm_forward<T>(const T*, const T*, double, int, int, T*, acc_t<T>*);       \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const acc_t<T>*, int, int,   \
                                    T*, acc_t<T>*);
MESHTRAIN_INSTANTIATE_NORMS(float)
MESHTRAIN_INSTANTIATE_NORMS(double)
MESHTRAIN_INSTANTIATE_NORMS(bf16)
#undef MESHTRAIN_INSTANTIATE_NORMS

}  // namespace meshtrain::kernels
