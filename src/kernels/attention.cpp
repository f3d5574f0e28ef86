#include "meshtrain/kernels/attention.hpp"

#include <algorithm>

#include "kernel_common.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/format.hpp"
#include "meshtrain/linalg/gemm.hpp"

namespace meshtrain::kernels {
using namespace detail;
using linalg::Op;

namespace {

/// Local kv head read by local query head h.
int kv_head(const AttentionShape& s, int h) {
  const int j = (s.q_head_offset + h) / s.group - s.kv_head_offset;
  MESHTRAIN_ASSERT(j >= 0 && j < s.Hkv,
                   "attention: query head %d (global %d, group %d) maps to kv head %d, outside "
                   "the local kv heads [%d, %d)",
                   h, s.q_head_offset + h, s.group, s.kv_head_offset + j, s.kv_head_offset,
                   s.kv_head_offset + s.Hkv);
  return j;
}

/// Row-wise causal softmax in place over p: rows of length L (row stride L); row r is query
/// position pos0 + r % Tq and sees keys [0, pos0 + r % Tq]. Those n entries become their
/// softmax, entries j >= n become 0 and are not read (the blocked score GEMMs leave some
/// unwritten). With `stats`, row r's maximum and 1 / sum go to stats[(r / Tq) * stats_stride
/// + 2 (r % Tq)] and the next element. Training's strips have Tq rows of one block starting
/// at query pos0; decoding against a KV cache has pos0 = cached positions.
template <class T>
void causal_softmax(T* p, std::int64_t rows, int Tq, int L, int pos0, acc_t<T>* stats = nullptr,
                    std::int64_t stats_stride = 0) {
  using A = acc_t<T>;
  Kokkos::parallel_for(
      "Kernels::attention_softmax", row_policy(static_cast<int>(rows)),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const int n = pos0 + static_cast<int>(r % Tq) + 1;
        T* pr = p + r * L;
        const A mx = team_max<A>(team, n, -math::infinity<A>(), [&](int j) { return load(pr[j]); });
        // Stores the exponentials and sums exactly the stored (rounded) values, so the
        // normalised row sums to 1 up to one rounding also for bf16.
        const A sum = team_sum<A>(team, n, [&](int j) {
          const T e = store<T>(exp_acc(load(pr[j]) - mx));
          pr[j] = e;
          return load(e);
        });
        const A inv = A(1) / sum;
        if (stats != nullptr)
          Kokkos::single(Kokkos::PerTeam(team), [&] {
            A* st = stats + (r / Tq) * stats_stride + 2 * (r % Tq);
            st[0] = mx;
            st[1] = inv;
          });
        team.team_barrier();
        team_for(team, n, [&](int j) { pr[j] = store<T>(load(pr[j]) * inv); });
        team_for(team, L - n, [&](int j) { pr[n + j] = store<T>(A(0)); });
      });
}

/// The probabilities causal_softmax wrote, again: p holds the same scores (the same GEMM
/// call) and `stats` that call's maxima and 1 / sums (same indexing), so every entry is
/// computed by the same two roundings and comes out bit for bit as in forward.
template <class T>
void causal_softmax_recompute(T* p, std::int64_t rows, int Tq, int L, int pos0, const acc_t<T>* stats,
                              std::int64_t stats_stride) {
  using A = acc_t<T>;
  Kokkos::parallel_for(
      "Kernels::attention_softmax_recompute", row_policy(static_cast<int>(rows)),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const int n = pos0 + static_cast<int>(r % Tq) + 1;
        T* pr = p + r * L;
        const A* st = stats + (r / Tq) * stats_stride + 2 * (r % Tq);
        const A mx = st[0], inv = st[1];
        team_for(team, n, [&](int j) {
          const T e = store<T>(exp_acc(load(pr[j]) - mx));
          pr[j] = store<T>(load(e) * inv);
        });
        team_for(team, L - n, [&](int j) { pr[n + j] = store<T>(A(0)); });
      });
}

/// ds = p * (dp - sum_j p_j dp_j) row-wise in place over dp, rows as in causal_softmax
/// (entries j >= n set to 0).
template <class T>
void causal_softmax_backward(const T* p, T* dp, std::int64_t rows, int Tq, int L, int pos0) {
  using A = acc_t<T>;
  Kokkos::parallel_for(
      "Kernels::attention_softmax_backward", row_policy(static_cast<int>(rows)),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const int n = pos0 + static_cast<int>(r % Tq) + 1;
        const T* pr = p + r * L;
        T* dr = dp + r * L;
        const A dot = team_sum<A>(team, n, [&](int j) { return load(pr[j]) * load(dr[j]); });
        team.team_barrier();
        team_for(team, n, [&](int j) { dr[j] = store<T>(load(pr[j]) * (load(dr[j]) - dot)); });
        team_for(team, L - n, [&](int j) { dr[n + j] = store<T>(A(0)); });
      });
}

/// Zeroes a (rows, cols; ld) block.
template <class T>
void zero_rows(T* x, int rows, int cols, int ld) {
  Kokkos::parallel_for(
      "Kernels::attention_zero_dkv", row_policy(rows), KOKKOS_LAMBDA(const Member& team) {
        T* xr = x + static_cast<std::int64_t>(team.league_rank()) * ld;
        team_for(team, cols, [&](int c) { xr[c] = store<T>(acc_t<T>(0)); });
      });
}

/// One block of query rows [i0, i1) of one head: its score strip (B, i1 - i0, i1), row
/// stride i1, is (scale q k^T) over keys [0, i1). The same call in forward and backward.
template <class T>
void score_strip(const AttentionShape& s, int h, int i0, int i1, const T* q, int ldq, const T* k, int ldk, T* strip) {
  const int j = kv_head(s, h), m = i1 - i0;
  linalg::gemm_strided_batched<T>(Op::N, Op::T, m, i1, s.hd, s.scale,
                                  q + static_cast<std::int64_t>(i0) * ldq + h * s.hd, ldq,
                                  static_cast<std::int64_t>(s.T) * ldq, k + j * s.hd, ldk,
                                  static_cast<std::int64_t>(s.T) * ldk, 0.0f, strip, i1,
                                  static_cast<std::int64_t>(m) * i1, s.B);
}

}  // namespace

int attention_block_rows(int T) { return kHostExec ? std::min(T, 128) : T; }

std::int64_t attention_workspace_elems(const AttentionShape& s) {
  return 2 * static_cast<std::int64_t>(s.B) * attention_block_rows(s.T) * s.T;
}

template <class T>
void attention_forward(const AttentionShape& s, const T* q, int ldq, const T* k, int ldk,
                       const T* v, int ldv, T* out, int ldo, acc_t<T>* stats, T* workspace) {
  // q: (B*T, ldq), k: (B*T, ldk), v: (B*T, ldv), out: (B*T, ldo), stats: (B, Hq, T, 2)
  Kokkos::Profiling::pushRegion("Kernels::attention_forward");
  const int Tn = s.T, hd = s.hd;
  const std::int64_t stats_b = 2 * static_cast<std::int64_t>(s.Hq) * Tn;  // stats stride between sequences
  const int rb = attention_block_rows(Tn);
  T* p = workspace;  // (B, i1 - i0, i1): one block's scores, then its probabilities
  for (int h = 0; h < s.Hq; ++h) {
    const int j = kv_head(s, h);
    for (int i0 = 0; i0 < Tn; i0 += rb) {
      const int i1 = std::min(Tn, i0 + rb), m = i1 - i0;
      score_strip(s, h, i0, i1, q, ldq, k, ldk, p);
      causal_softmax(p, static_cast<std::int64_t>(s.B) * m, m, i1, i0,
                     stats + 2 * (static_cast<std::int64_t>(h) * Tn + i0), stats_b);
      // out_bh[i0:i1] = P[b, i0:i1, 0:i1] v_bj[0:i1]
      linalg::gemm_strided_batched<T>(Op::N, Op::N, m, hd, i1, 1.0f, p, i1, static_cast<std::int64_t>(m) * i1,
                                      v + j * hd, ldv, static_cast<std::int64_t>(Tn) * ldv, 0.0f,
                                      out + static_cast<std::int64_t>(i0) * ldo + h * hd, ldo,
                                      static_cast<std::int64_t>(Tn) * ldo, s.B);
    }
  }
  Kokkos::Profiling::popRegion();
}

template <class T>
void attention_backward(const AttentionShape& s, const T* q, int ldq, const T* k, int ldk,
                        const T* v, int ldv, const acc_t<T>* stats, const T* dout, int ldo, T* dq,
                        T* dk, T* dv, T* workspace) {
  // dq like q; dk like k; dv like v; workspace: two strips of (B, rows, T): P and dP -> dS.
  Kokkos::Profiling::pushRegion("Kernels::attention_backward");
  const int Tn = s.T, hd = s.hd;
  const std::int64_t stats_b = 2 * static_cast<std::int64_t>(s.Hq) * Tn;
  const std::int64_t sq = static_cast<std::int64_t>(Tn) * ldq, sk = static_cast<std::int64_t>(Tn) * ldk,
                     sv = static_cast<std::int64_t>(Tn) * ldv, so = static_cast<std::int64_t>(Tn) * ldo;
  const int rb = attention_block_rows(Tn);
  T* p = workspace;                                                // (B, i1 - i0, i1)
  T* ds = workspace + static_cast<std::int64_t>(s.B) * rb * Tn;   // (B, i1 - i0, i1)
  const int N = s.B * Tn;
  // kv heads accumulate over the query heads that read them (in head order, then block order).
  zero_rows(dk, N, s.Hkv * hd, ldk);
  zero_rows(dv, N, s.Hkv * hd, ldv);
  for (int h = 0; h < s.Hq; ++h) {
    const int j = kv_head(s, h);
    for (int i0 = 0; i0 < Tn; i0 += rb) {
      const int i1 = std::min(Tn, i0 + rb), m = i1 - i0;
      const std::int64_t strip = static_cast<std::int64_t>(m) * i1, rows = static_cast<std::int64_t>(s.B) * m;
      // P: forward's probabilities of this block, from its scores and saved statistics.
      score_strip(s, h, i0, i1, q, ldq, k, ldk, p);
      causal_softmax_recompute(p, rows, m, i1, i0, stats + 2 * (static_cast<std::int64_t>(h) * Tn + i0), stats_b);
      // dP[b, i0:i1, 0:i1] = dout_bh[i0:i1] v_bj[0:i1]^T, then dS = P (dP - rowsum(P dP)) in place
      linalg::gemm_strided_batched<T>(Op::N, Op::T, m, i1, hd, 1.0f,
                                      dout + static_cast<std::int64_t>(i0) * ldo + h * hd, ldo, so, v + j * hd, ldv,
                                      sv, 0.0f, ds, i1, strip, s.B);
      causal_softmax_backward(p, ds, rows, m, i1, i0);
      // dq_bh[i0:i1] = scale * dS k_bj[0:i1]
      linalg::gemm_strided_batched<T>(Op::N, Op::N, m, hd, i1, s.scale, ds, i1, strip, k + j * hd, ldk, sk, 0.0f,
                                      dq + static_cast<std::int64_t>(i0) * ldq + h * hd, ldq, sq, s.B);
      // dk_bj[0:i1] += scale * dS^T q_bh[i0:i1]
      linalg::gemm_strided_batched<T>(Op::T, Op::N, i1, hd, m, s.scale, ds, i1, strip,
                                      q + static_cast<std::int64_t>(i0) * ldq + h * hd, ldq, sq, 1.0f, dk + j * hd,
                                      ldk, sk, s.B);
      // dv_bj[0:i1] += P^T dout_bh[i0:i1]
      linalg::gemm_strided_batched<T>(Op::T, Op::N, i1, hd, m, 1.0f, p, i1, strip,
                                      dout + static_cast<std::int64_t>(i0) * ldo + h * hd, ldo, so, 1.0f,
                                      dv + j * hd, ldv, sv, s.B);
    }
  }
  Kokkos::Profiling::popRegion();
}

template <class T>
void kv_cache_write(const AttentionShape& s, int pos0, int T_cache, const T* k, int ldk, const T* v, int ldv,
                    T* k_cache, T* v_cache) {
  // k, v: (B*Tq, ld) rows of new positions pos0 .. pos0+Tq-1; caches: (B, Hkv, T_cache, hd).
  MESHTRAIN_ASSERT(pos0 >= 0 && pos0 + s.T <= T_cache, "KV cache: positions [%d, %d) outside its %d slots", pos0,
                   pos0 + s.T, T_cache);
  const int Tq = s.T, Hkv = s.Hkv, hd = s.hd;
  Kokkos::parallel_for(
      "Kernels::kv_cache_write", row_policy(s.B * Tq), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank();
        const int b = r / Tq, t = pos0 + r % Tq;
        const T* kr = k + static_cast<std::int64_t>(r) * ldk;
        const T* vr = v + static_cast<std::int64_t>(r) * ldv;
        team_for2(team, Hkv, hd, [&](int j, int d) {
          const std::int64_t at = ((static_cast<std::int64_t>(b) * Hkv + j) * T_cache + t) * hd + d;
          k_cache[at] = kr[j * hd + d];
          v_cache[at] = vr[j * hd + d];
        });
      });
}

template <class T>
void attention_forward_cached(const AttentionShape& s, int pos0, int T_cache, const T* q, int ldq,
                              const T* k_cache, const T* v_cache, T* out, int ldo, T* scores) {
  // q: (B*Tq, ldq) at positions pos0 .. pos0+Tq-1; caches: (B, Hkv, T_cache, hd) filled up
  // to pos0+Tq; out: (B*Tq, ldo); scores: (B, Hq, Tq, L) with L = pos0 + Tq.
  Kokkos::Profiling::pushRegion("Kernels::attention_forward_cached");
  const int Tq = s.T, hd = s.hd, L = pos0 + Tq;
  MESHTRAIN_ASSERT(L <= T_cache, "KV cache: %d positions exceed its %d slots", L, T_cache);
  const std::int64_t TL = static_cast<std::int64_t>(Tq) * L;
  const std::int64_t sp = s.Hq * TL;                                        // scores stride between sequences
  const std::int64_t skv = static_cast<std::int64_t>(s.Hkv) * T_cache * hd;  // cache stride between sequences
  const std::int64_t head = static_cast<std::int64_t>(T_cache) * hd;          // cache stride between kv heads
  const int rb = attention_block_rows(Tq);
  for (int h = 0; h < s.Hq; ++h) {
    const int j = kv_head(s, h);
    for (int i0 = 0; i0 < Tq; i0 += rb) {
      const int i1 = std::min(Tq, i0 + rb);
      // scores[b, h, i0:i1, 0:pos0+i1] = scale * q_bh[i0:i1] K_bj[0:pos0+i1]^T
      linalg::gemm_strided_batched<T>(Op::N, Op::T, i1 - i0, pos0 + i1, hd, s.scale,
                                      q + static_cast<std::int64_t>(i0) * ldq + h * hd, ldq,
                                      static_cast<std::int64_t>(Tq) * ldq, k_cache + j * head, hd, skv, 0.0f,
                                      scores + h * TL + static_cast<std::int64_t>(i0) * L, L, sp, s.B);
    }
  }
  causal_softmax(scores, static_cast<std::int64_t>(s.B) * s.Hq * Tq, Tq, L, pos0);
  for (int h = 0; h < s.Hq; ++h) {
    const int j = kv_head(s, h);
    for (int i0 = 0; i0 < Tq; i0 += rb) {
      const int i1 = std::min(Tq, i0 + rb);
      // out_bh[i0:i1] = scores[b, h, i0:i1, 0:pos0+i1] V_bj[0:pos0+i1]
      linalg::gemm_strided_batched<T>(Op::N, Op::N, i1 - i0, hd, pos0 + i1, 1.0f,
                                      scores + h * TL + static_cast<std::int64_t>(i0) * L, L, sp, v_cache + j * head,
                                      hd, skv, 0.0f, out + static_cast<std::int64_t>(i0) * ldo + h * hd, ldo,
                                      static_cast<std::int64_t>(Tq) * ldo, s.B);
    }
  }
  Kokkos::Profiling::popRegion();
}

#define MESHTRAIN_INSTANTIATE_ATTENTION(T)                                                       \
  template void attention_forward<T>(const AttentionShape&, const T*, int, const T*, int,        \
                                     const T*, int, T*, int, acc_t<T>*, T*);                     \
  template void attention_backward<T>(const AttentionShape&, const T*, int, const T*, int,       \
                                      const T*, int, const acc_t<T>*, const T*, int, T*, T*, T*, \
                                      T*);                                                       \
  template void kv_cache_write<T>(const AttentionShape&, int, int, const T*, int, const T*, int, T*, T*); \
  template void attention_forward_cached<T>(const AttentionShape&, int, int, const T*, int, const T*,   \
                                            const T*, T*, int, T*);
MESHTRAIN_INSTANTIATE_ATTENTION(float)
MESHTRAIN_INSTANTIATE_ATTENTION(double)
MESHTRAIN_INSTANTIATE_ATTENTION(bf16)
#undef MESHTRAIN_INSTANTIATE_ATTENTION

}  // namespace meshtrain::kernels
