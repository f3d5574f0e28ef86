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

/// \brief One read of the row lr[0, nv): the running max m and the sum s of exp(l - m),
/// rescaled by exp(m_old - m_new) whenever the max grows (online softmax), instead of a
/// max pass followed by a sum pass. Every thread of the team gets the result.
/// On host (a team is one thread) the row goes by blocks of kOnlineBlock columns that stay
/// in L1: the block's max (vectorized), one rescale, then the block's sum of exp
/// (vectorized): one pass over memory, one exp per element. On GPUs each thread keeps its
/// own (m, s) over a strided subset of the columns, and the team merges the pairs (team
/// max, then the sum of s_t * exp(m_t - M)): a fixed tree for a fixed team size.
template <class A, class T>
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
    const int nt = team.team_size();
    A m = neg_inf, s = A(0);
    for (int c = team.team_rank(); c < nv; c += nt) {
      const A v = load(lr[c]);
      if (v > m) {
        s = s * exp_acc(A(m - v));
        m = v;
      }
      s += exp_acc(A(v - m));
    }
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
template <class A, class T>
KOKKOS_INLINE_FUNCTION void write_row_gradient(const Member& team, T* lr, int V_local, int nv, std::int64_t t,
                                               bool has_target, A target_logit, A mx, A sum, A g) {
  const A scale = g / sum;
  team.team_barrier();  // every thread has read the target logit before it is overwritten
  // Branch-free loops (vectorizable); the target's -g is applied afterwards.
  team_for(team, nv, [&](int c) { lr[c] = store<T>(exp_acc(A(load(lr[c]) - mx)) * scale); });
  team_for(team, V_local - nv, [&](int c) { lr[nv + c] = store<T>(A(0)); });
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
