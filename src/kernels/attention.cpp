#include "kernels/attention.hpp"

#include <algorithm>

#include "kernel_common.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "linalg/gemm.hpp"

#if defined(MESHTRAIN_WITH_CUDNN)
#include <mutex>
#include <set>
#include <type_traits>

#include "core/log.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/sdpa_layout.hpp"
#include "kernels/sdpa_ragged.hpp"
#endif

namespace meshtrain::kernels {
using namespace detail;
using linalg::Op;

namespace {

#if defined(MESHTRAIN_WITH_CUDNN)
/// The fused description of a call that asked for cuDNN: dense rows by sdpa_layout, packed
/// rows (document masks) by sdpa_ragged as a variable-length batch of documents; or an
/// unsupported one (Kokkos path). Each distinct reason a shape falls back is logged once per
/// process.
SdpaRaggedCall fused_layout(const AttentionShape& s, int ldq, int ldk, int ldv, int ldo) {
  if (s.path != AttentionPath::Cudnn) return SdpaRaggedCall{};
  SdpaRaggedCall call;
  if (s.doc_start != nullptr) call = sdpa_ragged(s, s.doc_start_host, ldq, ldk, ldv, ldo);
  else call.layout = sdpa_layout(s, ldq, ldk, ldv, ldo);
  const SdpaLayout& L = call.layout;
  if (!L.supported) {
    static std::mutex mutex;
    static std::set<std::string> told;
    std::lock_guard<std::mutex> lock(mutex);
    if (told.insert(L.why_not).second)
      log::info("gpu.attention=cudnn: %s take the Kokkos attention", L.why_not.c_str());
  }
  return call;
}

/// The fused kernel's device workspace (`bytes`, cuDNN's) followed, for packed rows, by the
/// ragged index (SdpaRagged::index_block(), 256-byte aligned) and the index kernel's scratch:
/// the caller's Kokkos scratch (attention_workspace_elems bf16 elements, which the fused path
/// does not otherwise use) when it is large enough, else a block from the memory pool for this
/// call (no allocation per step in training, where the scratch is T x T elements per row). The
/// index (48 bytes per graph batch entry, 3 KB for 32 documents) is computed on the device
/// from the uploaded document starts (kernels::sdpa_ragged_index), ordered after the kernels
/// before it and before the fused kernel that reads it: no copy from host memory (which
/// could make the host wait for the stream) and nothing a CUDA graph capture would refuse.
/// The host still describes the call (sdpa_ragged: the document count decides the graph
/// batch, and the starts are checked there) from its copy of the starts.
class FusedWorkspace {
 public:
  FusedWorkspace(std::size_t bytes, bf16* scratch, const AttentionShape& s, const SdpaRaggedCall& call, int ldq,
                 int ldk, int ldv, int ldo) {
    const std::size_t ws = (bytes + 255) / 256 * 256;
    const bool ragged = call.layout.ragged;
    const int batch = call.ragged.batch;
    const std::size_t index_elems = ragged ? static_cast<std::size_t>(sdpa_ragged_index_elems(batch)) : 0;
    const std::size_t scratch_elems = ragged ? static_cast<std::size_t>(batch) + 1 : 0;
    const std::size_t total = ws + (index_elems + scratch_elems) * sizeof(std::int64_t);
    if (total <= static_cast<std::size_t>(attention_workspace_elems(s)) * sizeof(bf16)) {
      ptr_ = scratch;
    } else {
      own_ = Buffer<float>((total + sizeof(float) - 1) / sizeof(float), MemCategory::Workspace);
      ptr_ = own_.data();
    }
    if (ragged) {
      index_ = reinterpret_cast<std::int64_t*>(static_cast<char*>(ptr_) + ws);
      const auto strides = sdpa_ragged_token_strides(s, ldq, ldk, ldv, ldo);
      sdpa_ragged_index(s.doc_start, s.B, s.T, strides.data(), batch, index_, index_ + index_elems);
    }
  }
  void* get() const { return ptr_; }
  const void* ragged_index() const { return index_; }

 private:
  void* ptr_ = nullptr;
  std::int64_t* index_ = nullptr;
  Buffer<float> own_;
};
#endif

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

/// Which strip columns row r of a softmax sees: [lo, n). Rows are (r / Tq) sequences of Tq
/// query rows; row r's own key is column qcol0 + r % Tq (so n = that + 1, causal). With
/// `docs` (the document starts of the rows' queries: docs[(r / Tq) * doc_stride + r % Tq],
/// positions in the sequence) the columns before the query's document start are masked too;
/// strip column c is key position k0 + c.
struct RowWindow {
  int Tq = 1, qcol0 = 0;
  const std::int32_t* docs = nullptr;
  std::int64_t doc_stride = 0;
  int k0 = 0;
  KOKKOS_INLINE_FUNCTION int n(std::int64_t r) const { return qcol0 + static_cast<int>(r % Tq) + 1; }
  KOKKOS_INLINE_FUNCTION int lo(std::int64_t r) const {
    return docs == nullptr ? 0 : docs[(r / Tq) * doc_stride + r % Tq] - k0;
  }
};

/// Row-wise causal softmax in place over p: rows of length L (row stride L), row r's visible
/// columns [lo, n) given by `w`. Those entries become their softmax, the others 0 (not read:
/// the blocked score GEMMs leave some unwritten). With `stats`, row r's maximum and 1 / sum
/// go to stats[(r / Tq) * stats_stride + 2 (r % Tq)] and the next element. Training's strips
/// have Tq rows of one block starting at query i0; decoding against a KV cache has qcol0 =
/// cached positions.
template <class T>
void causal_softmax(T* p, std::int64_t rows, int L, RowWindow w, acc_t<T>* stats = nullptr,
                    std::int64_t stats_stride = 0) {
  using A = acc_t<T>;
  const int Tq = w.Tq;
  Kokkos::parallel_for(
      "Kernels::attention_softmax", row_policy(static_cast<int>(rows)),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const int n = w.n(r), lo = w.lo(r), len = n - lo;
        T* pr = p + r * L;
        const A mx = team_max<A>(team, len, -math::infinity<A>(), [&](int j) { return load(pr[lo + j]); });
        // Stores the exponentials and sums exactly the stored (rounded) values, so the
        // normalised row sums to 1 up to one rounding also for bf16.
        const A sum = team_sum<A>(team, len, [&](int j) {
          const T e = store<T>(exp_acc(load(pr[lo + j]) - mx));
          pr[lo + j] = e;
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
        team_for(team, len, [&](int j) { pr[lo + j] = store<T>(load(pr[lo + j]) * inv); });
        team_for(team, lo, [&](int j) { pr[j] = store<T>(A(0)); });
        team_for(team, L - n, [&](int j) { pr[n + j] = store<T>(A(0)); });
      });
}

/// The probabilities causal_softmax wrote, again: p holds the same scores (the same GEMM
/// call) and `stats` that call's maxima and 1 / sums (same indexing), so every entry is
/// computed by the same two roundings and comes out bit for bit as in forward.
template <class T>
void causal_softmax_recompute(T* p, std::int64_t rows, int L, RowWindow w, const acc_t<T>* stats,
                              std::int64_t stats_stride) {
  using A = acc_t<T>;
  const int Tq = w.Tq;
  Kokkos::parallel_for(
      "Kernels::attention_softmax_recompute", row_policy(static_cast<int>(rows)),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const int n = w.n(r), lo = w.lo(r);
        T* pr = p + r * L;
        const A* st = stats + (r / Tq) * stats_stride + 2 * (r % Tq);
        const A mx = st[0], inv = st[1];
        team_for(team, n - lo, [&](int j) {
          const T e = store<T>(exp_acc(load(pr[lo + j]) - mx));
          pr[lo + j] = store<T>(load(e) * inv);
        });
        team_for(team, lo, [&](int j) { pr[j] = store<T>(A(0)); });
        team_for(team, L - n, [&](int j) { pr[n + j] = store<T>(A(0)); });
      });
}

/// ds = p * (dp - sum_j p_j dp_j) row-wise in place over dp, rows as in causal_softmax
/// (entries outside [lo, n) set to 0).
template <class T>
void causal_softmax_backward(const T* p, T* dp, std::int64_t rows, int L, RowWindow w) {
  using A = acc_t<T>;
  Kokkos::parallel_for(
      "Kernels::attention_softmax_backward", row_policy(static_cast<int>(rows)),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const int n = w.n(r), lo = w.lo(r), len = n - lo;
        const T* pr = p + r * L + lo;
        T* dr = dp + r * L;
        const A dot = team_sum<A>(team, len, [&](int j) { return load(pr[j]) * load(dr[lo + j]); });
        team.team_barrier();
        team_for(team, len, [&](int j) { dr[lo + j] = store<T>(load(pr[j]) * (load(dr[lo + j]) - dot)); });
        team_for(team, lo, [&](int j) { dr[j] = store<T>(A(0)); });
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

AttentionTileCounts g_tiles;  // see attention_tile_counts()

/// The sequences one query block's GEMMs run over together, [b0, b0 + nb), and the first key
/// k0 they multiply against (strip column c = key k0 + c).
struct StripPlan {
  int b0 = 0, nb = 1, k0 = 0;
};

/// Calls f(plan) for the strips of query block [i0, i1) of one head. Document-masked on host:
/// one sequence at a time from k0 = its doc_start[i0], since the block's queries see no key
/// before the document of its first query (doc starts are non-decreasing), so the key blocks
/// wholly before k0 are skipped. Otherwise all sequences together from key 0 (GPUs mask the
/// same scores in the softmax instead: one large batched GEMM beats B small ones there).
template <class F>
void for_each_strip(const AttentionShape& s, int i0, F&& f) {
  const int rb = attention_block_rows(s.T);
  const std::int64_t causal_tiles = i0 / rb + 1;  // key blocks of [0, i1)
  if (s.doc_start != nullptr && kHostExec) {
    for (int b = 0; b < s.B; ++b) {
      const int k0 = s.doc_start[static_cast<std::int64_t>(b) * s.T + i0];
      MESHTRAIN_ASSERT(k0 >= 0 && k0 <= i0, "attention: sequence %d's query %d has document start %d", b, i0, k0);
      g_tiles.skipped += k0 / rb;
      g_tiles.computed += causal_tiles - k0 / rb;
      f(StripPlan{b, 1, k0});
    }
  } else {
    g_tiles.computed += causal_tiles * s.B;
    f(StripPlan{0, s.B, 0});
  }
}

/// The softmax rows of strip `pl` of query block [i0, i0 + m).
RowWindow row_window(const AttentionShape& s, const StripPlan& pl, int i0, int m) {
  RowWindow w;
  w.Tq = m;
  w.qcol0 = i0 - pl.k0;
  w.k0 = pl.k0;
  if (s.doc_start != nullptr) {
    w.docs = s.doc_start + static_cast<std::int64_t>(pl.b0) * s.T + i0;
    w.doc_stride = s.T;
  }
  return w;
}

/// Rows of sequence b starting at position t, in a (B*T, ld) buffer.
template <class P>
P* at_row(P* x, const AttentionShape& s, int b, int t, int ld) {
  return x + (static_cast<std::int64_t>(b) * s.T + t) * ld;
}

/// One strip of query rows [i0, i1) of one head: its scores (nb, i1 - i0, L = i1 - k0), row
/// stride L, are (scale q k^T) over keys [k0, i1). The same call in forward and backward.
template <class T>
void score_strip(const AttentionShape& s, const StripPlan& pl, int h, int i0, int i1, const T* q, int ldq,
                 const T* k, int ldk, T* strip) {
  const int j = kv_head(s, h), m = i1 - i0, L = i1 - pl.k0;
  linalg::gemm_strided_batched<T>(Op::N, Op::T, m, L, s.hd, s.scale, at_row(q, s, pl.b0, i0, ldq) + h * s.hd, ldq,
                                  static_cast<std::int64_t>(s.T) * ldq, at_row(k, s, pl.b0, pl.k0, ldk) + j * s.hd,
                                  ldk, static_cast<std::int64_t>(s.T) * ldk, 0.0f, strip, L,
                                  static_cast<std::int64_t>(m) * L, pl.nb);
}

}  // namespace

std::string fused_attention_version() {
#if defined(MESHTRAIN_WITH_CUDNN)
  return cudnn::version_string();
#else
  return "";
#endif
}

bool attention_is_fused(AttentionPath path, bool bf16) {
  return path == AttentionPath::Cudnn && bf16 && !fused_attention_version().empty();
}

AttentionTileCounts attention_tile_counts() { return g_tiles; }
void reset_attention_tile_counts() { g_tiles = AttentionTileCounts{}; }

int attention_block_rows(int T) { return kHostExec ? std::min(T, 128) : T; }

int attention_work_rows(AttentionPath path, bool bf16, int T) {
#if defined(MESHTRAIN_WITH_CUDNN)
  if (path == AttentionPath::Cudnn && bf16) return 1;
#else
  (void)path;
  (void)bf16;
#endif
  return attention_block_rows(T);
}

std::int64_t attention_workspace_elems(const AttentionShape& s) {
  return 2 * static_cast<std::int64_t>(s.B) * attention_block_rows(s.T) * s.T;
}

template <class T>
void attention_forward(const AttentionShape& s, const T* q, int ldq, const T* k, int ldk,
                       const T* v, int ldv, T* out, int ldo, acc_t<T>* stats, T* workspace) {
  // q: (B*T, ldq), k: (B*T, ldk), v: (B*T, ldv), out: (B*T, ldo), stats: (B, Hq, T, 2)
#if defined(MESHTRAIN_WITH_CUDNN)
  if constexpr (std::is_same_v<T, bf16>) {
    if (const SdpaRaggedCall call = fused_layout(s, ldq, ldk, ldv, ldo); call.layout.supported) {
      const SdpaLayout& L = call.layout;
      Kokkos::Profiling::pushRegion(L.ragged ? "Kernels::attention_forward_cudnn_ragged" : "Kernels::attention_forward_cudnn");
      FusedWorkspace ws(cudnn::sdpa_forward_workspace(L, s.scale, stats != nullptr), workspace, s, call, ldq, ldk,
                        ldv, ldo);
      cudnn::sdpa_forward(L, s.scale, q, k, v, out, stats, ws.get(), ExecSpace().cuda_stream(), ws.ragged_index());
      Kokkos::Profiling::popRegion();
      return;
    }
  }
#endif
  Kokkos::Profiling::pushRegion("Kernels::attention_forward");
  const int Tn = s.T, hd = s.hd;
  const std::int64_t stats_b = 2 * static_cast<std::int64_t>(s.Hq) * Tn;  // stats stride between sequences
  const int rb = attention_block_rows(Tn);
  T* p = workspace;  // (nb, i1 - i0, i1 - k0): one strip's scores, then its probabilities
  for (int h = 0; h < s.Hq; ++h) {
    const int j = kv_head(s, h);
    for (int i0 = 0; i0 < Tn; i0 += rb) {
      const int i1 = std::min(Tn, i0 + rb), m = i1 - i0;
      for_each_strip(s, i0, [&](const StripPlan& pl) {
        const int L = i1 - pl.k0;
        score_strip(s, pl, h, i0, i1, q, ldq, k, ldk, p);
        causal_softmax(p, static_cast<std::int64_t>(pl.nb) * m, L, row_window(s, pl, i0, m),
                       stats + pl.b0 * stats_b + 2 * (static_cast<std::int64_t>(h) * Tn + i0), stats_b);
        // out_bh[i0:i1] = P[b, i0:i1, k0:i1] v_bj[k0:i1]
        linalg::gemm_strided_batched<T>(Op::N, Op::N, m, hd, L, 1.0f, p, L, static_cast<std::int64_t>(m) * L,
                                        at_row(v, s, pl.b0, pl.k0, ldv) + j * hd, ldv,
                                        static_cast<std::int64_t>(Tn) * ldv, 0.0f,
                                        at_row(out, s, pl.b0, i0, ldo) + h * hd, ldo,
                                        static_cast<std::int64_t>(Tn) * ldo, pl.nb);
      });
    }
  }
  Kokkos::Profiling::popRegion();
}

template <class T>
void attention_backward(const AttentionShape& s, const T* q, int ldq, const T* k, int ldk,
                        const T* v, int ldv, const T* out, const acc_t<T>* stats, const T* dout, int ldo,
                        T* dq, T* dk, T* dv, T* workspace) {
  // dq like q; dk like k; dv like v; workspace: two strips of (B, rows, T): P and dP -> dS.
  const int N = s.B * s.T;
#if defined(MESHTRAIN_WITH_CUDNN)
  if constexpr (std::is_same_v<T, bf16>) {
    if (const SdpaRaggedCall call = fused_layout(s, ldq, ldk, ldv, ldo); call.layout.supported) {
      const SdpaLayout& L = call.layout;
      Kokkos::Profiling::pushRegion(L.ragged ? "Kernels::attention_backward_cudnn_ragged" : "Kernels::attention_backward_cudnn");
      if (L.unread_kv_heads) {  // kv heads no local query head reads get no gradient
        zero_rows(dk, N, s.Hkv * s.hd, ldk);
        zero_rows(dv, N, s.Hkv * s.hd, ldv);
      }
      FusedWorkspace ws(cudnn::sdpa_backward_workspace(L, s.scale), workspace, s, call, ldq, ldk, ldv, ldo);
      cudnn::sdpa_backward(L, s.scale, q, k, v, out, dout, stats, dq, dk, dv, ws.get(), ExecSpace().cuda_stream(),
                           ws.ragged_index());
      Kokkos::Profiling::popRegion();
      return;
    }
  }
#endif
  (void)out;  // the Kokkos path recomputes the probabilities from q, k and stats instead
  Kokkos::Profiling::pushRegion("Kernels::attention_backward");
  const int Tn = s.T, hd = s.hd;
  const std::int64_t stats_b = 2 * static_cast<std::int64_t>(s.Hq) * Tn;
  const std::int64_t sq = static_cast<std::int64_t>(Tn) * ldq, sk = static_cast<std::int64_t>(Tn) * ldk,
                     sv = static_cast<std::int64_t>(Tn) * ldv, so = static_cast<std::int64_t>(Tn) * ldo;
  const int rb = attention_block_rows(Tn);
  T* p = workspace;                                                // (nb, i1 - i0, i1 - k0)
  T* ds = workspace + static_cast<std::int64_t>(s.B) * rb * Tn;   // (nb, i1 - i0, i1 - k0)
  // kv heads accumulate over the query heads that read them (in head order, then block order).
  zero_rows(dk, N, s.Hkv * hd, ldk);
  zero_rows(dv, N, s.Hkv * hd, ldv);
  for (int h = 0; h < s.Hq; ++h) {
    const int j = kv_head(s, h);
    for (int i0 = 0; i0 < Tn; i0 += rb) {
      const int i1 = std::min(Tn, i0 + rb), m = i1 - i0;
      for_each_strip(s, i0, [&](const StripPlan& pl) {
        const int L = i1 - pl.k0;
        const std::int64_t strip = static_cast<std::int64_t>(m) * L, rows = static_cast<std::int64_t>(pl.nb) * m;
        const RowWindow w = row_window(s, pl, i0, m);
        const T* q_blk = at_row(q, s, pl.b0, i0, ldq) + h * hd;
        const T* do_blk = at_row(dout, s, pl.b0, i0, ldo) + h * hd;
        // P: forward's probabilities of this strip, from its scores and saved statistics.
        score_strip(s, pl, h, i0, i1, q, ldq, k, ldk, p);
        causal_softmax_recompute(p, rows, L, w, stats + pl.b0 * stats_b + 2 * (static_cast<std::int64_t>(h) * Tn + i0),
                                 stats_b);
        // dP[b, i0:i1, k0:i1] = dout_bh[i0:i1] v_bj[k0:i1]^T, then dS = P (dP - rowsum(P dP)) in place
        linalg::gemm_strided_batched<T>(Op::N, Op::T, m, L, hd, 1.0f, do_blk, ldo, so,
                                        at_row(v, s, pl.b0, pl.k0, ldv) + j * hd, ldv, sv, 0.0f, ds, L, strip, pl.nb);
        causal_softmax_backward(p, ds, rows, L, w);
        // dq_bh[i0:i1] = scale * dS k_bj[k0:i1]
        linalg::gemm_strided_batched<T>(Op::N, Op::N, m, hd, L, s.scale, ds, L, strip,
                                        at_row(k, s, pl.b0, pl.k0, ldk) + j * hd, ldk, sk, 0.0f,
                                        at_row(dq, s, pl.b0, i0, ldq) + h * hd, ldq, sq, pl.nb);
        // dk_bj[k0:i1] += scale * dS^T q_bh[i0:i1]
        linalg::gemm_strided_batched<T>(Op::T, Op::N, L, hd, m, s.scale, ds, L, strip, q_blk, ldq, sq, 1.0f,
                                        at_row(dk, s, pl.b0, pl.k0, ldk) + j * hd, ldk, sk, pl.nb);
        // dv_bj[k0:i1] += P^T dout_bh[i0:i1]
        linalg::gemm_strided_batched<T>(Op::T, Op::N, L, hd, m, 1.0f, p, L, strip, do_blk, ldo, so, 1.0f,
                                        at_row(dv, s, pl.b0, pl.k0, ldv) + j * hd, ldv, sv, pl.nb);
      });
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
  RowWindow w;  // query i of the Tq new ones sees cached keys [0, pos0 + i]
  w.Tq = Tq;
  w.qcol0 = pos0;
  causal_softmax(scores, static_cast<std::int64_t>(s.B) * s.Hq * Tq, L, w);
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
                                      const T*, int, const T*, const acc_t<T>*, const T*, int,   \
                                      T*, T*, T*, T*);                                           \
  template void kv_cache_write<T>(const AttentionShape&, int, int, const T*, int, const T*, int, T*, T*); \
  template void attention_forward_cached<T>(const AttentionShape&, int, int, const T*, int, const T*,   \
                                            const T*, T*, int, T*);
MESHTRAIN_INSTANTIATE_ATTENTION(float)
MESHTRAIN_INSTANTIATE_ATTENTION(double)
MESHTRAIN_INSTANTIATE_ATTENTION(bf16)
#undef MESHTRAIN_INSTANTIATE_ATTENTION

}  // namespace meshtrain::kernels
