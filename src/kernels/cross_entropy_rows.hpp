#pragma once
/// \brief Private row functions of the cross-entropy kernels (three-pass and one-pass
/// online forms): the online (max, sum-exp) statistics of one row and the in-place write of
/// its gradient. Called inside a row team (kernel_common.hpp's row_policy).

#include <cstdint>

#include "kernel_common.hpp"

namespace meshtrain::kernels::detail {

/// Softmax statistics of one row: its max and the sum of exp(l - max).
template <class A>
struct RowStats {
  A max;
  A sum;
};

/// \brief The GPU form's share of one thread in a row's online statistics: the running max m
/// and the sum s of exp(l - m) over the packs p = first, first + stride, ... of K columns
/// (kernel_common.hpp's packs; K > 1 where the rows are ce_rows_packable), columns at or past
/// nv skipped (the last pack may hold padding columns: read, not counted). Per pack its max
/// first, then at most one rescale of s by exp(m_old - m_new), then the pack's exps. A thread
/// without valid columns returns (-inf, 0). Called by online_row_stats on GPUs with the
/// thread's rank and the team size; host tests call it lane by lane.
template <int K, class A, class T>
KOKKOS_INLINE_FUNCTION RowStats<A> strided_row_stats(const T* lr, int nv, int first, int stride) {
  const A neg_inf = -math::infinity<A>();
  const int packs = (nv + K - 1) / K;
  A m = neg_inf, s = A(0);
  for (int p = first; p < packs; p += stride) {
    const Pack<T, K> v = load_pack<K>(lr, p);
    const int n = nv - p * K < K ? nv - p * K : K;  // valid columns of this pack
    A pm = neg_inf;
    for (int j = 0; j < n; ++j) pm = A(load(v.v[j])) > pm ? A(load(v.v[j])) : pm;
    if (pm > m) {
      s = s * exp_acc(A(m - pm));  // exp(-inf) = 0 for the first pack
      m = pm;
    }
    for (int j = 0; j < n; ++j) s += exp_acc(A(load(v.v[j]) - m));
  }
  return {m, s};
}

/// \brief The GPU form's share of one thread in a row's gradient: the packs p = first,
/// first + stride, ... of the row lr (V_local columns, a whole number of packs of K) become
/// exp(l - mx) * scale in the nv real columns and 0 in the padding ones.
template <int K, class A, class T>
KOKKOS_INLINE_FUNCTION void strided_row_gradient(T* lr, int V_local, int nv, A mx, A scale, int first, int stride) {
  for (int p = first; p < V_local / K; p += stride) {
    Pack<T, K> v = load_pack<K>(lr, p);
    for (int j = 0; j < K; ++j) v.v[j] = store<T>(p * K + j < nv ? exp_acc(A(load(v.v[j]) - mx)) * scale : A(0));
    store_pack<K>(lr, p, v);
  }
}

/// Whether the rows of this logits matrix can be moved in 16-byte packs: the slice a whole
/// number of packs, and every row on 16 bytes (the leading dimension and the base).
template <class T>
inline bool ce_rows_in_packs(const T* logits, int ld, int V_local) {
  return rows_in_packs(V_local, sizeof(T), {ld}, {logits});
}
/// Whether the GPU form moves them so: never on host builds, whose row loops go by blocks.
template <class T>
inline bool ce_rows_packable(const T* logits, int ld, int V_local) {
  return !kHostExec && ce_rows_in_packs(logits, ld, V_local);
}

/// \brief One read of the row lr[0, nv): the running max m and the sum s of exp(l - m),
/// rescaled by exp(m_old - m_new) whenever the max grows (online softmax), instead of a
/// max pass followed by a sum pass. Every thread of the team gets the result.
/// On host (a team is one thread) the row goes by blocks of kOnlineBlock columns that stay
/// in L1: the block's max (vectorized), one rescale, then the block's sum of exp
/// (vectorized): one pass over memory, one exp per element (K is not used there). On GPUs
/// each thread keeps its own (m, s) over a strided subset of the row's packs of K columns
/// (strided_row_stats), and the team merges the pairs (team max, then the sum of
/// s_t * exp(m_t - M)): a fixed tree for a fixed team size.
template <class A, int K = 1, class T>
KOKKOS_INLINE_FUNCTION RowStats<A> online_row_stats(const Member& team, const T* lr, int nv) {
  const A neg_inf = -math::infinity<A>();
  if constexpr (kHostExec) {
    constexpr int kOnlineBlock = 512;
    A m = neg_inf, s = A(0);
    for (int c0 = 0; c0 < nv; c0 += kOnlineBlock) {
      const int n = nv - c0 < kOnlineBlock ? nv - c0 : kOnlineBlock;
      const T* b = lr + c0;
      const A bm = lane_max<A>(n, neg_inf, [&](int i) { return A(load(b[i])); });
      if (bm > m) {
        s = s * exp_acc(A(m - bm));  // exp(-inf) = 0 for the first block
        m = bm;
      }
      s += lane_sum<A>(n, [&](int i) { return exp_acc(A(load(b[i]) - m)); });
    }
    return {m, s};
  } else {
    const RowStats<A> own = strided_row_stats<K, A>(lr, nv, team.team_rank(), team.team_size());
    const A m = own.max, s = own.sum;
    A mx = m;
    team.team_reduce(Kokkos::Max<A>(mx));
    // A thread without columns (s = 0, m = -inf) adds nothing (and no exp(-inf + inf)).
    A sum = s > A(0) ? s * exp_acc(A(m - mx)) : A(0);
    team.team_reduce(Kokkos::Sum<A>(sum));
    return {mx, sum};
  }
}

/// A row without a target (tgt < 0: masked out of the loss) gets a zero gradient over all
/// V_local columns; returns true for it, so the caller skips the row.
template <class A, class T>
KOKKOS_INLINE_FUNCTION bool zero_untargeted_row(const Member& team, T* lr, int V_local, std::int32_t tgt) {
  if (tgt >= 0) return false;
  team_for(team, V_local, [&](int c) { lr[c] = store<T>(A(0)); });
  return true;
}

/// The gradient coefficient of row r: grad_scale, times the row's own coefficient where
/// row_scale is given (DPO: each sequence's rows carry one, negative for a rejected one).
template <class A>
KOKKOS_INLINE_FUNCTION A row_coefficient(A grad_scale, const float* row_scale, std::int64_t r) {
  return row_scale ? grad_scale * A(row_scale[r]) : grad_scale;
}

/// \brief Overwrites the row lr (V_local columns, the first nv of them real vocabulary) by
/// g * (softmax - onehot(t)) from its statistics (mx, sum over the whole vocabulary);
/// target_logit = lr[t] read before the call (t is a column of this slice when has_target).
/// K > 1 (GPUs, ce_rows_packable rows): each thread writes its strided packs.
template <class A, int K = 1, class T>
KOKKOS_INLINE_FUNCTION void write_row_gradient(const Member& team, T* lr, int V_local, int nv, std::int64_t t,
                                               bool has_target, A target_logit, A mx, A sum, A g) {
  const A scale = g / sum;
  team.team_barrier();  // every thread has read the target logit before it is overwritten
  if (K > 1) {
    strided_row_gradient<K>(lr, V_local, nv, mx, scale, team.team_rank(), team.team_size());
  } else {
    // Branch-free loops (vectorizable); the target's -g is applied afterwards.
    team_for(team, nv, [&](int c) { lr[c] = store<T>(exp_acc(A(load(lr[c]) - mx)) * scale); });
    team_for(team, V_local - nv, [&](int c) { lr[nv + c] = store<T>(A(0)); });
  }
  team.team_barrier();
  team_single(team, [&]() {
    if (has_target) lr[t] = store<T>(exp_acc(A(target_logit - mx)) * scale - g);
  });
}

/// Number of leading columns of the slice that are real vocabulary (the rest is padding).
inline int valid_columns(int V_local, std::int64_t vocab_start, std::int64_t valid_vocab) {
  const std::int64_t n = valid_vocab - vocab_start;
  return n <= 0 ? 0 : (n >= V_local ? V_local : static_cast<int>(n));
}

}  // namespace meshtrain::kernels::detail
