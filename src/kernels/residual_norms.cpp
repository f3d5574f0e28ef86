#include "kernels/residual_norms.hpp"

#include <string>

#include "core/error.hpp"
#include "kernel_common.hpp"
#include "norm_rows.hpp"

namespace meshtrain::kernels {
using namespace detail;

namespace {

/// Adds the blocks' partials P (blocks, NS, C) per column in block order: out_k[c] += the
/// sum of partial k, for each out_k (a parameter gradient, acc_t<T>) that is not null (NS <= 3).
template <class T, int NS>
void sum_block_partials(const char* name, const acc_t<T>* P, int blocks, int C, acc_t<T>* o0, acc_t<T>* o1 = nullptr,
                        acc_t<T>* o2 = nullptr) {
  static_assert(NS >= 1 && NS <= 3, "at most three partial sums");
  using A = acc_t<T>;
  Kokkos::parallel_for(
      name, RangeInt(0, C), KOKKOS_LAMBDA(int c) {
        A s[NS];
        for (int k = 0; k < NS; ++k) s[k] = A(0);
        for (int blk = 0; blk < blocks; ++blk)
          for (int k = 0; k < NS; ++k) s[k] += P[(static_cast<std::int64_t>(blk) * NS + k) * C + c];
        A* const out[3] = {o0, o1, o2};
        for (int k = 0; k < NS; ++k)
          if (out[k]) out[k][c] += s[k];
      });
}

/// Adds the units' partials P (units, NS, C) per column in unit order, in two passes so that
/// a GPU spreads them over many threads: chunks of kPartialChunk units per column, then the
/// chunks in chunk order. out_k[c] += the sum of partial k, for each out_k that is not null.
template <class T, int NS>
void sum_unit_partials(const char* name, const acc_t<T>* P, int units, int C, acc_t<T>* o0, acc_t<T>* o1 = nullptr,
                       acc_t<T>* o2 = nullptr) {
  static_assert(NS >= 1 && NS <= 3, "at most three partial sums");
  using A = acc_t<T>;
  constexpr int kPartialChunk = 32;
  const int chunks = (units + kPartialChunk - 1) / kPartialChunk;
  // Q: (chunks, NS, C) the chunks' sums.
  Buffer<A> chunk_sums(static_cast<std::size_t>(chunks) * NS * C, MemCategory::Workspace);
  A* Q = chunk_sums.data();
  Kokkos::parallel_for(
      std::string(name) + "_chunks", Range64(0, static_cast<std::int64_t>(chunks) * C),
      KOKKOS_LAMBDA(std::int64_t idx) {
        const int ch = static_cast<int>(idx / C);
        const int c = static_cast<int>(idx % C);
        const int u1 = units < (ch + 1) * kPartialChunk ? units : (ch + 1) * kPartialChunk;
        A s[NS];
        for (int k = 0; k < NS; ++k) s[k] = A(0);
        for (int u = ch * kPartialChunk; u < u1; ++u)
          for (int k = 0; k < NS; ++k) s[k] += P[(static_cast<std::int64_t>(u) * NS + k) * C + c];
        for (int k = 0; k < NS; ++k) Q[(static_cast<std::int64_t>(ch) * NS + k) * C + c] = s[k];
      });
  sum_block_partials<T, NS>(name, Q, chunks, C, o0, o1, o2);
}

/// The backward's row blocks: kNormRowBlock rows per team (Rows), kWarpRowBlock per warp (Warps).
template <bool Warps>
constexpr int row_block() {
  return Warps ? kWarpRowBlock : kNormRowBlock;
}

/// Pack p of a block's partial row: `terms` at the block's first row, else the partial plus
/// `terms` (one sum per column, in row order).
template <int K, class A>
KOKKOS_FORCEINLINE_FUNCTION void add_partial(A* partial_row, int p, bool first, const Pack<A, K>& terms) {
  if (first) {
    store_pack<K>(partial_row, p, terms);
  } else {
    Pack<A, K> acc = load_pack<K>(partial_row, p);
    for (int j = 0; j < K; ++j) acc.v[j] += terms.v[j];
    store_pack<K>(partial_row, p, acc);
  }
}

/// Adds the backward's block partials (blocks, NS, C) in that form's order.
template <bool Warps, class T, int NS>
void sum_partials(const char* name, const acc_t<T>* P, int blocks, int C, acc_t<T>* o0, acc_t<T>* o1 = nullptr,
                  acc_t<T>* o2 = nullptr) {
  if constexpr (Warps) {
    sum_unit_partials<T, NS>(name, P, blocks, C, o0, o1, o2);
  } else {
    sum_block_partials<T, NS>(name, P, blocks, C, o0, o1, o2);
  }
}

// One body per kernel for every form, as in kernels/norms.cpp: K the pack width (16 bytes in
// the Warps form where the rows allow it, else 1); loops run over a row's C / K packs.

template <bool Warps, int K, class T>
void layernorm_forward_kernel(T* h, const T* residual, const T* bias, const T* w, const T* b, double eps, int N, int C,
                              T* y, acc_t<T>* mean, acc_t<T>* rstd) {
  // h, residual, y: (N, C); bias, w, b: (C); mean, rstd: (N)
  using A = acc_t<T>;
  using Ops = RowOps<Warps>;
  using P = Pack<T, K>;
  const A eps_a = static_cast<A>(eps);
  const A inv_c = A(1) / static_cast<A>(C);
  const int packs = C / K;
  Kokkos::parallel_for(
      Warps ? (K > 1 ? "Kernels::residual_layernorm_forward_warps16" : "Kernels::residual_layernorm_forward_warps")
            : "Kernels::residual_layernorm_forward",
      Ops::policy(N), KOKKOS_LAMBDA(const Member& team) {
        const int r = Ops::unit(team);
        if (r >= N) return;
        T* hr = h + static_cast<std::int64_t>(r) * C;
        const T* xr = residual + static_cast<std::int64_t>(r) * C;
        T* yr = y + static_cast<std::int64_t>(r) * C;
        // The residual add, rounded as add_bias then add_inplace round, fused into the mean.
        const A m = Ops::template sum<A>(team, packs, [&](int p) {
                      P hv = load_pack<K>(hr, p);
                      const P xv = load_pack<K>(xr, p);
                      const P bv = bias ? load_pack<K>(bias, p) : P{};
                      for (int j = 0; j < K; ++j) {
                        const T v = bias ? store<T>(load(hv.v[j]) + load(bv.v[j])) : hv.v[j];
                        hv.v[j] = store<T>(load(v) + load(xv.v[j]));
                      }
                      store_pack<K>(hr, p, hv);
                      return pack_sum<A, K>([&](int j) { return A(load(hv.v[j])); });
                    }) * inv_c;
        Ops::sync(team);  // the row of h is written before any thread reads it back
        const A var = row_variance<Ops, K>(team, packs, hr, m, inv_c);
        const A rs = A(1) / math::sqrt(var + eps_a);
        layernorm_output<Ops, K>(team, packs, hr, w, b, m, rs, yr);
        Ops::single(team, [&]() {
          mean[r] = m;
          rstd[r] = rs;
        });
      });
}

template <bool Warps, int K, class T>
void layernorm_backward_kernel(const T* dy, const T* h, const T* w, const acc_t<T>* mean, const acc_t<T>* rstd, int N,
                               int C, T* dx, acc_t<T>* dw, acc_t<T>* db, acc_t<T>* dbias) {
  // dy, h, dx: (N, C); w, dw, db, dbias: (C); mean, rstd: (N)
  using A = acc_t<T>;
  using Ops = RowOps<Warps>;
  using P = Pack<T, K>;
  using PA = Pack<A, K>;
  constexpr int NS = 3;  // partials: dw, db, dbias
  constexpr int RB = row_block<Warps>();
  const bool params = dw != nullptr || db != nullptr || dbias != nullptr;
  const int blocks = (N + RB - 1) / RB;
  // Pt: (blocks, NS, C) partial column sums, each block's written by its team (warp) alone.
  Buffer<A> partial(params ? static_cast<std::size_t>(blocks) * NS * C : 0, MemCategory::Workspace);
  A* Pt = partial.data();
  MESHTRAIN_ASSERT(K == 1 || norm_rows_packable(C, sizeof(A), {Pt}), "fused norm backward: partials not packable");
  const A inv_c = A(1) / static_cast<A>(C);
  const int packs = C / K;
  Kokkos::parallel_for(
      Warps ? (K > 1 ? "Kernels::residual_layernorm_backward_warps16" : "Kernels::residual_layernorm_backward_warps")
            : "Kernels::residual_layernorm_backward",
      Ops::policy(blocks), KOKKOS_LAMBDA(const Member& team) {
        const int blk = Ops::unit(team);
        if (blk >= blocks) return;
        const int r0 = blk * RB;
        const int r1 = N < r0 + RB ? N : r0 + RB;
        A* Pb = Pt + static_cast<std::int64_t>(blk) * NS * C;
        for (int r = r0; r < r1; ++r) {
          const std::int64_t off = static_cast<std::int64_t>(r) * C;
          const T* dyr = dy + off;
          const T* hr = h + off;
          T* dxr = dx + off;
          const A m = mean[r];
          const A rs = rstd[r];
          const LayerNormBackwardMeans<A> means =
              layernorm_backward_means<Ops, K>(team, packs, dyr, w, hr, m, rs, inv_c);
          const bool first = r == r0;
          // A plain `if` on the constant, not `if constexpr`: nvcc's extended lambdas cannot
          // first-capture variables inside a constexpr-if branch (the outer KOKKOS_LAMBDA
          // captures params, NS and Pt here); the dead branch costs nothing.
          if (kHostExec && !Warps) {
            // Host (K == 1 here: packs are elements): the dx loop alone (as the unfused
            // kernel's), then each partial row in a loop of its own over the row, still in
            // cache. One loop writing dx and three partial rows through pointers of one type
            // does not vectorize (the compiler must assume they alias, and the run-time alias
            // checks of six pointers exceed its limit) and measured slower than the unfused
            // backward on CPU; loops with one store each do vectorize (perf/bench_norms.sh,
            // perf/README.md). Same values.
            Ops::loop(team, C, [&](int c) {
              dxr[c] = store<T>(layernorm_dx(load(dxr[c]), load(dyr[c]), load(w[c]), load(hr[c]), m, rs, means));
            });
            if (params) {
              A* const p0 = Pb;
              A* const p1 = Pb + C;
              A* const p2 = Pb + 2 * C;
              if (first) {
                Ops::loop(team, NS * C, [&](int i) { Pb[i] = A(0); });
              }
              Ops::loop(team, C, [&](int c) { p0[c] += load(dyr[c]) * ((load(hr[c]) - m) * rs); });
              Ops::loop(team, C, [&](int c) { p1[c] += load(dyr[c]); });
              Ops::loop(team, C, [&](int c) { p2[c] += A(load(dxr[c])); });
            }
          } else {
            Ops::loop(team, packs, [&](int p) {
              const P dyv = load_pack<K>(dyr, p);
              const P hv = load_pack<K>(hr, p);
              const P wv = load_pack<K>(w, p);
              P dxv = load_pack<K>(dxr, p);
              PA gx, g1, gdx;  // the row's terms of dw, db, dbias
              for (int j = 0; j < K; ++j) {
                const A g = load(dyv.v[j]);
                const A xhat = (load(hv.v[j]) - m) * rs;
                dxv.v[j] = store<T>(layernorm_dx(load(dxv.v[j]), g, load(wv.v[j]), load(hv.v[j]), m, rs, means));
                gx.v[j] = g * xhat;
                g1.v[j] = g;
                gdx.v[j] = A(load(dxv.v[j]));
              }
              store_pack<K>(dxr, p, dxv);
              if (params) {
                add_partial<K>(Pb, p, first, gx);
                add_partial<K>(Pb + C, p, first, g1);
                add_partial<K>(Pb + 2 * C, p, first, gdx);
              }
            });
          }
        }
      });
  if (params)
    sum_partials<Warps, T, NS>(Warps ? "Kernels::residual_layernorm_backward_warps_params"
                                     : "Kernels::residual_layernorm_backward_params",
                               Pt, blocks, C, dw, db, dbias);
}

template <bool Warps, int K, class T>
void rmsnorm_forward_kernel(T* h, const T* residual, const T* w, double eps, int N, int C, T* y, acc_t<T>* rstd) {
  // h, residual, y: (N, C); w: (C); rstd: (N)
  using A = acc_t<T>;
  using Ops = RowOps<Warps>;
  using P = Pack<T, K>;
  const A eps_a = static_cast<A>(eps);
  const A inv_c = A(1) / static_cast<A>(C);
  const int packs = C / K;
  Kokkos::parallel_for(
      Warps ? (K > 1 ? "Kernels::residual_rmsnorm_forward_warps16" : "Kernels::residual_rmsnorm_forward_warps")
            : "Kernels::residual_rmsnorm_forward",
      Ops::policy(N), KOKKOS_LAMBDA(const Member& team) {
        const int r = Ops::unit(team);
        if (r >= N) return;
        T* hr = h + static_cast<std::int64_t>(r) * C;
        const T* xr = residual + static_cast<std::int64_t>(r) * C;
        T* yr = y + static_cast<std::int64_t>(r) * C;
        // The residual add, rounded as add_inplace rounds, fused into the mean square.
        const A ms = Ops::template sum<A>(team, packs, [&](int p) {
                       P hv = load_pack<K>(hr, p);
                       const P xv = load_pack<K>(xr, p);
                       for (int j = 0; j < K; ++j) hv.v[j] = store<T>(load(hv.v[j]) + load(xv.v[j]));
                       store_pack<K>(hr, p, hv);
                       return pack_sum<A, K>([&](int j) {
                         const A v = load(hv.v[j]);
                         return v * v;
                       });
                     }) * inv_c;
        Ops::sync(team);  // the row of h is written before any thread reads it back
        const A rs = A(1) / math::sqrt(ms + eps_a);
        rmsnorm_output<Ops, K>(team, packs, hr, w, rs, yr);
        Ops::single(team, [&]() { rstd[r] = rs; });
      });
}

template <bool Warps, int K, class T>
void rmsnorm_backward_kernel(const T* dy, const T* h, const T* w, const acc_t<T>* rstd, int N, int C, T* dx,
                             acc_t<T>* dw) {
  // dy, h, dx: (N, C); w, dw: (C); rstd: (N)
  using A = acc_t<T>;
  using Ops = RowOps<Warps>;
  using P = Pack<T, K>;
  using PA = Pack<A, K>;
  constexpr int RB = row_block<Warps>();
  const bool params = dw != nullptr;
  const int blocks = (N + RB - 1) / RB;
  // Pt: (blocks, C) partial column sums of dw, each block's written by its team (warp) alone.
  Buffer<A> partial(params ? static_cast<std::size_t>(blocks) * C : 0, MemCategory::Workspace);
  A* Pt = partial.data();
  MESHTRAIN_ASSERT(K == 1 || norm_rows_packable(C, sizeof(A), {Pt}), "fused norm backward: partials not packable");
  const A inv_c = A(1) / static_cast<A>(C);
  const int packs = C / K;
  Kokkos::parallel_for(
      Warps ? (K > 1 ? "Kernels::residual_rmsnorm_backward_warps16" : "Kernels::residual_rmsnorm_backward_warps")
            : "Kernels::residual_rmsnorm_backward",
      Ops::policy(blocks), KOKKOS_LAMBDA(const Member& team) {
        const int blk = Ops::unit(team);
        if (blk >= blocks) return;
        const int r0 = blk * RB;
        const int r1 = N < r0 + RB ? N : r0 + RB;
        A* Pb = Pt + static_cast<std::int64_t>(blk) * C;
        for (int r = r0; r < r1; ++r) {
          const std::int64_t off = static_cast<std::int64_t>(r) * C;
          const T* dyr = dy + off;
          const T* hr = h + off;
          T* dxr = dx + off;
          const A rs = rstd[r];
          const A mean_dxhat_xhat = rmsnorm_backward_mean<Ops, K>(team, packs, dyr, w, hr, rs, inv_c);
          const bool first = r == r0;
          Ops::loop(team, packs, [&](int p) {
            const P dyv = load_pack<K>(dyr, p);
            const P hv = load_pack<K>(hr, p);
            const P wv = load_pack<K>(w, p);
            P dxv = load_pack<K>(dxr, p);
            PA gx;
            for (int j = 0; j < K; ++j) {
              const A g = load(dyv.v[j]);
              dxv.v[j] = store<T>(rmsnorm_dx(load(dxv.v[j]), g, load(wv.v[j]), load(hv.v[j]), rs, mean_dxhat_xhat));
              gx.v[j] = g * (load(hv.v[j]) * rs);
            }
            store_pack<K>(dxr, p, dxv);
            if (params) add_partial<K>(Pb, p, first, gx);
          });
        }
      });
  if (params)
    sum_partials<Warps, T, 1>(Warps ? "Kernels::residual_rmsnorm_backward_warps_params"
                                    : "Kernels::residual_rmsnorm_backward_params",
                              Pt, blocks, C, dw);
}

}  // namespace

template <class T>
void residual_layernorm_forward(T* h, const T* residual, const T* bias, const T* w, const T* b, double eps, int N,
                                int C, T* y, acc_t<T>* mean, acc_t<T>* rstd, NormForm form, bool row_packs) {
  if (form == NormForm::Rows) layernorm_forward_kernel<false, 1>(h, residual, bias, w, b, eps, N, C, y, mean, rstd);
  else if (row_packs && norm_rows_packable(C, sizeof(T), {h, residual, bias, w, b, y}))
    layernorm_forward_kernel<true, kPackWidth<T>>(h, residual, bias, w, b, eps, N, C, y, mean, rstd);
  else layernorm_forward_kernel<true, 1>(h, residual, bias, w, b, eps, N, C, y, mean, rstd);
}

template <class T>
void residual_layernorm_backward(const T* dy, const T* h, const T* w, const acc_t<T>* mean, const acc_t<T>* rstd,
                                 int N, int C, T* dx, acc_t<T>* dw, acc_t<T>* db, acc_t<T>* dbias, NormForm form, bool row_packs) {
  if (form == NormForm::Rows) layernorm_backward_kernel<false, 1>(dy, h, w, mean, rstd, N, C, dx, dw, db, dbias);
  else if (row_packs && norm_rows_packable(C, sizeof(T), {dy, h, w, dx}))
    layernorm_backward_kernel<true, kPackWidth<T>>(dy, h, w, mean, rstd, N, C, dx, dw, db, dbias);
  else layernorm_backward_kernel<true, 1>(dy, h, w, mean, rstd, N, C, dx, dw, db, dbias);
}

template <class T>
void residual_rmsnorm_forward(T* h, const T* residual, const T* w, double eps, int N, int C, T* y, acc_t<T>* rstd,
                              NormForm form, bool row_packs) {
  if (form == NormForm::Rows) rmsnorm_forward_kernel<false, 1>(h, residual, w, eps, N, C, y, rstd);
  else if (row_packs && norm_rows_packable(C, sizeof(T), {h, residual, w, y}))
    rmsnorm_forward_kernel<true, kPackWidth<T>>(h, residual, w, eps, N, C, y, rstd);
  else rmsnorm_forward_kernel<true, 1>(h, residual, w, eps, N, C, y, rstd);
}

template <class T>
void residual_rmsnorm_backward(const T* dy, const T* h, const T* w, const acc_t<T>* rstd, int N, int C, T* dx,
                               acc_t<T>* dw, NormForm form, bool row_packs) {
  if (form == NormForm::Rows) rmsnorm_backward_kernel<false, 1>(dy, h, w, rstd, N, C, dx, dw);
  else if (row_packs && norm_rows_packable(C, sizeof(T), {dy, h, w, dx}))
    rmsnorm_backward_kernel<true, kPackWidth<T>>(dy, h, w, rstd, N, C, dx, dw);
  else rmsnorm_backward_kernel<true, 1>(dy, h, w, rstd, N, C, dx, dw);
}

#define MESHTRAIN_INSTANTIATE_RESIDUAL_NORMS(T)                                                                 \
  template void residual_layernorm_forward<T>(T*, const T*, const T*, const T*, const T*, double, int, int, T*, \
                                              acc_t<T>*, acc_t<T>*, NormForm, bool);                                 \
  template void residual_layernorm_backward<T>(const T*, const T*, const T*, const acc_t<T>*, const acc_t<T>*,  \
                                               int, int, T*, acc_t<T>*, acc_t<T>*, acc_t<T>*, NormForm, bool);       \
  template void residual_rmsnorm_forward<T>(T*, const T*, const T*, double, int, int, T*, acc_t<T>*, NormForm, bool); \
  template void residual_rmsnorm_backward<T>(const T*, const T*, const T*, const acc_t<T>*, int, int, T*,       \
                                             acc_t<T>*, NormForm, bool);
MESHTRAIN_INSTANTIATE_RESIDUAL_NORMS(float)
MESHTRAIN_INSTANTIATE_RESIDUAL_NORMS(double)
MESHTRAIN_INSTANTIATE_RESIDUAL_NORMS(bf16)
#undef MESHTRAIN_INSTANTIATE_RESIDUAL_NORMS

}  // namespace meshtrain::kernels
