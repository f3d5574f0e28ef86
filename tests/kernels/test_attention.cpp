// Causal attention with grouped-query heads (plain MHA, GQA, GQA under tensor parallelism
// with replicated or split kv heads): forward against a host reference, backward against
// finite differences, bf16 against fp32, determinism.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_utils.hpp"
#include "kernels/attention.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

/// q, k, v live in one fused (N, ld) buffer, as the QKV projection writes them:
/// columns [0, Hq*hd) = q, then Hkv*hd of k, then Hkv*hd of v, then padding.
struct Layout {
  k::AttentionShape s;
  int ld = 0, ldo = 0;
  std::size_t q_off() const { return 0; }
  std::size_t k_off() const { return static_cast<std::size_t>(s.Hq) * s.hd; }
  std::size_t v_off() const { return static_cast<std::size_t>(s.Hq + s.Hkv) * s.hd; }
  int N() const { return s.B * s.T; }
  std::size_t qkv_size() const { return static_cast<std::size_t>(N()) * ld; }
  std::size_t out_size() const { return static_cast<std::size_t>(N()) * ldo; }
  std::size_t stats_size() const { return static_cast<std::size_t>(s.B) * s.Hq * s.T * 2; }
};

Layout make_layout(int B, int T, int Hq, int Hkv, int hd, int group, int q_off, int kv_off) {
  Layout L;
  L.s.B = B;
  L.s.T = T;
  L.s.Hq = Hq;
  L.s.Hkv = Hkv;
  L.s.hd = hd;
  L.s.group = group;
  L.s.q_head_offset = q_off;
  L.s.kv_head_offset = kv_off;
  L.s.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  L.ld = (Hq + 2 * Hkv) * hd + 3;
  L.ldo = Hq * hd + 2;
  return L;
}

/// Straightforward reference: for each (b, h, i), softmax over t <= i of scale q.k, then
/// the probability-weighted sum of v; stats (b, h, i) = (max score, 1 / sum of exp(score - max)).
/// With `docs` ((B, T) document starts), query i of sequence b sees keys [docs[b, i], i] only.
void attention_ref(const Layout& L, const std::vector<double>& qkv, std::vector<double>& out,
                   std::vector<double>& stats, const std::vector<std::int32_t>* docs = nullptr) {
  const auto& s = L.s;
  out.assign(L.out_size(), 0.0);
  stats.assign(L.stats_size(), 0.0);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.Hq; ++h) {
      const int j = (s.q_head_offset + h) / s.group - s.kv_head_offset;
      for (int i = 0; i < s.T; ++i) {
        const double* q = &qkv[(static_cast<std::size_t>(b) * s.T + i) * L.ld + L.q_off() + h * s.hd];
        const int t0 = docs ? (*docs)[static_cast<std::size_t>(b) * s.T + i] : 0;
        std::vector<double> sc(i + 1);
        double mx = -1e300;
        for (int t = t0; t <= i; ++t) {
          const double* kk = &qkv[(static_cast<std::size_t>(b) * s.T + t) * L.ld + L.k_off() + j * s.hd];
          double d = 0;
          for (int c = 0; c < s.hd; ++c) d += q[c] * kk[c];
          sc[t] = static_cast<double>(s.scale) * d;
          mx = std::max(mx, sc[t]);
        }
        double sum = 0;
        for (int t = t0; t <= i; ++t) sum += (sc[t] = std::exp(sc[t] - mx));
        double* o = &out[(static_cast<std::size_t>(b) * s.T + i) * L.ldo + h * s.hd];
        double* st = &stats[((static_cast<std::size_t>(b) * s.Hq + h) * s.T + i) * 2];
        st[0] = mx;
        st[1] = 1.0 / sum;
        for (int t = t0; t <= i; ++t) {
          const double* vv = &qkv[(static_cast<std::size_t>(b) * s.T + t) * L.ld + L.v_off() + j * s.hd];
          for (int c = 0; c < s.hd; ++c) o[c] += sc[t] / sum * vv[c];
        }
      }
    }
}

struct Run {
  std::vector<double> out, stats, grad;
};

/// Forward (and backward with dout = w when w is given) on the device in type T.
template <class T>
Run run_attention(const Layout& L, const std::vector<double>& qkv, const std::vector<double>* w,
                     double grad_init = 0.0) {
  Run r;
  if (L.s.doc_start != nullptr) k::reset_attention_tile_counts();
  auto d = upload<T>(qkv);
  auto out = upload<T>(std::vector<double>(L.out_size(), 0.0));
  Buffer<acc_t<T>> stats(L.stats_size(), MemCategory::Workspace);
  // Scratch filled with NaN: nothing may read what the kernels did not write.
  auto work = upload<T>(std::vector<double>(k::attention_workspace_elems(L.s), std::nan("")));
  k::attention_forward(L.s, d.data() + L.q_off(), L.ld, d.data() + L.k_off(), L.ld, d.data() + L.v_off(),
                       L.ld, out.data(), L.ldo, stats.data(), work.data());
  r.out = download(out);
  r.stats = download(stats);
  if (w) {
    auto dout = upload<T>(*w);
    // Gradient buffer in the fused layout, pre-filled: dq, dk, dv must be overwritten.
    auto g = upload<T>(std::vector<double>(L.qkv_size(), grad_init));
    auto ws = upload<T>(std::vector<double>(k::attention_workspace_elems(L.s), std::nan("")));
    k::attention_backward(L.s, d.data() + L.q_off(), L.ld, d.data() + L.k_off(), L.ld, d.data() + L.v_off(),
                          L.ld, out.data(), stats.data(), dout.data(), L.ldo, g.data() + L.q_off(), g.data() + L.k_off(),
                          g.data() + L.v_off(), ws.data());
    r.grad = download(g);
  }
  return r;
}

void check_case(const Layout& L, std::uint64_t seed, std::size_t fd_samples) {
  auto qkv = random_normal(L.qkv_size(), seed);
  const auto w = random_normal(L.out_size(), seed + 1);
  const auto r = run_attention<double>(L, qkv, &w, 123.0);
  std::vector<double> ref_out, ref_stats;
  attention_ref(L, qkv, ref_out, ref_stats);
  // 1e-12 (floor 1e-9): the same sums in double in another order (GEMM blocking).
  expect_close("attention out", r.out, ref_out, 1e-12, 1e-9);
  expect_close("attention stats (row max, 1 / sum)", r.stats, ref_stats, 1e-12, 1e-9);

  // Overwrite semantics: the gradient does not depend on the buffer's previous contents.
  const auto r0 = run_attention<double>(L, qkv, &w, 0.0);
  auto grad = r.grad;
  const std::size_t head_cols = L.v_off() + static_cast<std::size_t>(L.s.Hkv) * L.s.hd;
  for (int n = 0; n < L.N(); ++n)
    for (int c = 0; c < L.ld; ++c) {
      const std::size_t i = static_cast<std::size_t>(n) * L.ld + c;
      if (c < static_cast<int>(head_cols)) {
        EXPECT_EQ(grad[i], r0.grad[i]) << "gradient depends on the buffer's old contents at " << i;
      } else {
        EXPECT_EQ(grad[i], 123.0) << "padding column written at " << i;
        grad[i] = 0.0;  // not an input of the loss
      }
    }
  auto loss = [&]() { return weighted_sum(w, run_attention<double>(L, qkv, nullptr).out); };
  fd_check("attention d(q|k|v)", qkv, grad, loss, fd_samples, seed + 2);
  // Kv heads that no local query head reads get exactly zero gradient.
  for (int j = 0; j < L.s.Hkv; ++j) {
    bool used = false;
    for (int h = 0; h < L.s.Hq; ++h)
      used |= (L.s.q_head_offset + h) / L.s.group - L.s.kv_head_offset == j;
    if (used) continue;
    for (int n = 0; n < L.N(); ++n)
      for (int c = 0; c < L.s.hd; ++c) {
        EXPECT_EQ(r.grad[static_cast<std::size_t>(n) * L.ld + L.k_off() + j * L.s.hd + c], 0.0);
        EXPECT_EQ(r.grad[static_cast<std::size_t>(n) * L.ld + L.v_off() + j * L.s.hd + c], 0.0);
      }
  }
}

/// Incremental decoding: the positions fed in chunks (a prefill of `prefill`, then one at a
/// time) through kv_cache_write + attention_forward_cached, each chunk's output rows
/// against the full causal reference at those positions (double).
void check_cached(const Layout& L, int prefill, std::uint64_t seed) {
  const auto& s = L.s;
  const auto qkv = random_normal(L.qkv_size(), seed);
  std::vector<double> ref_out, ref_stats;
  attention_ref(L, qkv, ref_out, ref_stats);
  const int T_cache = s.T + 3;  // room to spare: the cache's stride is T_cache, not T
  const std::size_t cache_n = static_cast<std::size_t>(s.B) * s.Hkv * T_cache * s.hd;
  auto k_cache = upload<double>(std::vector<double>(cache_n, 0.0));
  auto v_cache = upload<double>(std::vector<double>(cache_n, 0.0));
  std::vector<double> got(L.out_size(), 0.0), want(L.out_size(), 0.0);
  for (int pos0 = 0; pos0 < s.T;) {
    const int Tq = pos0 == 0 ? prefill : 1;
    // Rows of positions pos0 .. pos0+Tq-1 of every sequence: (B*Tq, ld).
    std::vector<double> chunk(static_cast<std::size_t>(s.B) * Tq * L.ld);
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tq; ++t)
        std::copy_n(&qkv[(static_cast<std::size_t>(b) * s.T + pos0 + t) * L.ld], L.ld,
                    &chunk[(static_cast<std::size_t>(b) * Tq + t) * L.ld]);
    k::AttentionShape cs = s;
    cs.T = Tq;
    auto d = upload<double>(chunk);
    auto out = upload<double>(std::vector<double>(static_cast<std::size_t>(s.B) * Tq * L.ldo, 0.0));
    Buffer<double> scores(static_cast<std::size_t>(s.B) * s.Hq * Tq * (pos0 + Tq), MemCategory::Workspace);
    k::kv_cache_write(cs, pos0, T_cache, d.data() + L.k_off(), L.ld, d.data() + L.v_off(), L.ld, k_cache.data(),
                      v_cache.data());
    k::attention_forward_cached(cs, pos0, T_cache, d.data() + L.q_off(), L.ld, k_cache.data(), v_cache.data(),
                                out.data(), L.ldo, scores.data());
    const std::vector<double> o = download(out);
    for (int b = 0; b < s.B; ++b)
      for (int t = 0; t < Tq; ++t) {
        const std::size_t row = static_cast<std::size_t>(b) * s.T + pos0 + t;
        for (int c = 0; c < s.Hq * s.hd; ++c) {
          got[row * L.ldo + c] = o[(static_cast<std::size_t>(b) * Tq + t) * L.ldo + c];
          want[row * L.ldo + c] = ref_out[row * L.ldo + c];
        }
      }
    pos0 += Tq;
  }
  // Floor 1: outputs are O(1) mixtures of O(1) values; a few cancel to ~1e-5, where the
  // other summation order leaves ~1e-16 absolute.
  expect_close("cached attention out", got, want, 1e-12, 1.0);
}

}  // namespace

TEST(KernelsAttention, MultiHead) { check_case(make_layout(2, 5, 2, 2, 4, 1, 0, 0), 1, 120); }

TEST(KernelsAttention, GroupedQuery) {
  // Hq = 4, Hkv = 2: query heads 0,1 read kv head 0; 2,3 read kv head 1.
  check_case(make_layout(2, 6, 4, 2, 4, 2, 0, 0), 10, 150);
}

TEST(KernelsAttention, TensorParallelReplicatedKv) {
  // 8 query heads, 2 kv heads (group 4), tp = 2, this is rank 1: local query heads are
  // global 4..7, both kv heads replicated (offset 0); all read kv head 1, kv head 0 gets 0.
  check_case(make_layout(2, 6, 4, 2, 4, 4, 4, 0), 20, 150);
}

TEST(KernelsAttention, TensorParallelSplitKv) {
  // Same model, kv heads split over tp: rank 1 holds kv head 1 only (offset 1).
  check_case(make_layout(2, 6, 4, 1, 4, 4, 4, 1), 30, 150);
}

TEST(KernelsAttention, LongSequenceCausalBlocks) {
  // T > 128 exercises the host path's blocked causal GEMMs (row blocks [0,128), [128,150)).
  check_case(make_layout(2, 150, 2, 1, 8, 2, 0, 0), 40, 120);
}

TEST(KernelsAttention, Fp32AgainstReference) {
  const Layout L = make_layout(2, 150, 4, 2, 16, 2, 0, 0);
  const auto qkv = to_double(convert<float>(random_normal(L.qkv_size(), 45, 2.0)));
  const auto f = run_attention<float>(L, qkv, nullptr);
  std::vector<double> ref_out, ref_stats;
  attention_ref(L, qkv, ref_out, ref_stats);
  // 1e-5 relative. An fp32 score carries an absolute error ~ eps * sum|q_i k_i| * scale
  // (~1e-6 here: q, k ~ N(0, 4), scores up to ~20), which moves each probability by that
  // much relatively; fp32 exp and sums over <= 150 terms add less. Floors: stats 1e-3 (a
  // row maximum near 0 has the scores' absolute error); out 1 (absolute 1e-5), because an
  // output is an average of v values (|v| ~ 2) that can cancel to near zero, so its error
  // (observed <= 3e-6) is relative to |v|.
  expect_close("fp32 attention out", f.out, ref_out, 1e-5, 1.0);
  expect_close("fp32 attention stats", f.stats, ref_stats, 1e-5, 1e-3);
}

TEST(KernelsAttention, Bf16MatchesFloat) {
  const Layout L = make_layout(2, 150, 4, 2, 16, 2, 0, 0);
  const auto qkv = bf16_exact(random_normal(L.qkv_size(), 50));
  const auto w = bf16_exact(random_normal(L.out_size(), 51));
  const auto f = run_attention<float>(L, qkv, &w);
  const auto b = run_attention<bf16>(L, qkv, &w);
  // Elementwise 3e-2 (normwise 1e-2 as everywhere): the bf16 path stores the scores, P, dP
  // and dS in bf16 (the strips are of the compute type, as in PyTorch's bf16 math
  // attention), and a score of magnitude ~4 rounded to bf16 moves its probability by ~1%;
  // measured here: normwise ~4e-3, elementwise up to ~2.8e-2. The stats are fp32 of bf16
  // scores.
  expect_bf16_close("attention out", b.out, f.out, 3e-2);
  expect_bf16_close("attention stats", b.stats, f.stats, 3e-2);
  expect_bf16_close("attention d(q|k|v)", b.grad, f.grad, 3e-2);
}

TEST(KernelsAttention, Deterministic) {
  const Layout L = make_layout(2, 200, 4, 2, 16, 2, 0, 0);
  const auto qkv = random_normal(L.qkv_size(), 60);
  const auto w = random_normal(L.out_size(), 61);
  const auto a = run_attention<float>(L, qkv, &w);
  const auto b = run_attention<float>(L, qkv, &w);
  EXPECT_TRUE(bitwise_equal(a.out, b.out));
  EXPECT_TRUE(bitwise_equal(a.grad, b.grad));
}

TEST(KernelsAttention, CachedDecodingMultiHead) { check_cached(make_layout(2, 9, 2, 2, 4, 1, 0, 0), 5, 31); }
TEST(KernelsAttention, CachedDecodingGroupedQuery) { check_cached(make_layout(2, 7, 4, 2, 8, 2, 0, 0), 3, 32); }
TEST(KernelsAttention, CachedDecodingTensorParallelSplitKv) {
  // tp rank 1 of 2 with 4 query / 2 kv heads in total: query heads 2,3 read kv head 1.
  check_cached(make_layout(3, 6, 2, 1, 4, 2, 2, 1), 1, 33);
}
TEST(KernelsAttention, CachedPrefillLongerThanOneBlock) {
  // 150 prompt positions: the host's 128-row causal blocks split the prefill.
  check_cached(make_layout(1, 152, 2, 1, 4, 2, 0, 0), 150, 34);
}

TEST(KernelsAttention, ScratchIsTwoScoreStripsNotTheSquare) {
  // The (B, Hq, T, T) probabilities are never held: forward keeps 2 values per query row
  // and the scratch is two (B, rows, T) strips, whatever the number of heads.
  k::AttentionShape s;
  s.B = 2;
  s.T = 1024;
  s.Hq = s.Hkv = 12;
  const std::int64_t rows = k::attention_block_rows(s.T);
  EXPECT_EQ(k::attention_workspace_elems(s), 2 * s.B * rows * s.T);
  s.Hq = s.Hkv = 1;
  EXPECT_EQ(k::attention_workspace_elems(s), 2 * s.B * rows * s.T);
  if (Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible) {
    EXPECT_EQ(rows, 128);  // host: 128-row blocks, so the scratch grows linearly with T
    EXPECT_EQ(k::attention_block_rows(100), 100);
  }
}

// ---- Document-masked attention (packed rows) ---------------------------------------------

namespace {

/// (B, T) document starts of rows made of documents of the given lengths (each row's lengths
/// sum to T).
std::vector<std::int32_t> doc_starts(const std::vector<std::vector<int>>& lens, int T) {
  std::vector<std::int32_t> d;
  for (const auto& row : lens) {
    int start = 0;
    for (int n : row) {
      for (int t = 0; t < n; ++t) d.push_back(start);
      start += n;
    }
    EXPECT_EQ(start, T) << "test rows must fill T";
  }
  return d;
}

/// Brute force: tiles (b, h, query block, key block <= query block) of rb x rb in which no
/// query sees any key (every score masked out by the causal or the document mask).
std::int64_t masked_tiles(const std::vector<std::int32_t>& docs, int B, int T, int Hq, int rb) {
  std::int64_t n = 0;
  for (int b = 0; b < B; ++b)
    for (int qb = 0; qb * rb < T; ++qb)
      for (int kb = 0; kb <= qb; ++kb) {
        bool seen = false;
        for (int i = qb * rb; i < std::min(T, (qb + 1) * rb) && !seen; ++i)
          for (int j = kb * rb; j < std::min(T, (kb + 1) * rb) && !seen; ++j)
            seen = j <= i && j >= docs[static_cast<std::size_t>(b) * T + i];
        if (!seen) ++n;
      }
  return n * Hq;
}

std::int64_t causal_tiles(int B, int T, int Hq, int rb) {
  std::int64_t n = 0;
  for (int qb = 0; qb * rb < T; ++qb) n += qb + 1;
  return n * B * Hq;
}

/// Rows of random document lengths in [1, max_len] (the last one cut to fill T).
std::vector<int> random_lengths(int T, int max_len, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> lens;
  for (int left = T; left > 0;) {
    const int n = std::min(left, 1 + static_cast<int>(rng() % static_cast<std::uint64_t>(max_len)));
    lens.push_back(n);
    left -= n;
  }
  return lens;
}

void check_doc_case(Layout L, const std::vector<std::vector<int>>& lens, std::uint64_t seed, std::size_t fd_samples) {
  const auto docs = doc_starts(lens, L.s.T);
  auto d_docs = to_device(docs);
  L.s.doc_start = d_docs.data();
  auto qkv = random_normal(L.qkv_size(), seed);
  const auto w = random_normal(L.out_size(), seed + 1);
  const auto r = run_attention<double>(L, qkv, &w, 123.0);  // forward + backward
  const k::AttentionTileCounts tiles = k::attention_tile_counts();
  std::vector<double> ref_out, ref_stats;
  attention_ref(L, qkv, ref_out, ref_stats, &docs);
  // Floor 1 for out (as for cached decoding): a short document's output mixes few values and
  // can cancel to ~1e-6, where the other summation order leaves ~1e-16 absolute.
  expect_close("document-masked attention out", r.out, ref_out, 1e-12, 1.0);
  expect_close("document-masked attention stats", r.stats, ref_stats, 1e-12, 1.0);
  auto grad = r.grad;
  const std::size_t head_cols = L.v_off() + static_cast<std::size_t>(L.s.Hkv) * L.s.hd;
  for (int n = 0; n < L.N(); ++n)
    for (int c = static_cast<int>(head_cols); c < L.ld; ++c) grad[static_cast<std::size_t>(n) * L.ld + c] = 0.0;
  auto loss = [&]() { return weighted_sum(w, run_attention<double>(L, qkv, nullptr).out); };
  fd_check("document-masked attention d(q|k|v)", qkv, grad, loss, fd_samples, seed + 2);

  // The same masking without the document mask gives other outputs (the test can fail).
  Layout plain = L;
  plain.s.doc_start = nullptr;
  const auto unmasked = run_attention<double>(plain, qkv, nullptr);
  double diff = 0;
  for (std::size_t i = 0; i < ref_out.size(); ++i) diff = std::max(diff, std::abs(unmasked.out[i] - ref_out[i]));
  EXPECT_GT(diff, 1e-3) << "these rows have several documents: plain causal attention must differ";

  // Tiles: forward and backward each visit every causal tile once, and skip exactly the
  // wholly masked-out ones on host builds (GPU builds: one tile per row, none skipped).
  const int rb = k::attention_block_rows(L.s.T);
  const std::int64_t all = causal_tiles(L.s.B, L.s.T, L.s.Hq, rb);
  const std::int64_t masked = masked_tiles(docs, L.s.B, L.s.T, L.s.Hq, rb);
  EXPECT_EQ(tiles.computed + tiles.skipped, 2 * all);
  if (rb < L.s.T) {
    EXPECT_GT(masked, 0) << "the test's documents must leave whole tiles masked out";
    EXPECT_EQ(tiles.skipped, 2 * masked);
  } else {
    EXPECT_EQ(tiles.skipped, 0);
  }

  // fp32 against the double reference, as in Fp32AgainstReference.
  const auto f = run_attention<float>(L, to_double(convert<float>(qkv)), nullptr);
  std::vector<double> ref32, stats32;
  attention_ref(L, to_double(convert<float>(qkv)), ref32, stats32, &docs);
  expect_close("fp32 document-masked attention out", f.out, ref32, 1e-5, 1.0);
  // Stats floor 1: a row maximum near 0 carries the fp32 scores' absolute error (~1e-6).
  expect_close("fp32 document-masked attention stats", f.stats, stats32, 1e-5, 1.0);
}

}  // namespace

TEST(KernelsAttention, DocumentMaskedRandomBoundaries) {
  // T = 300: host blocks [0,128), [128,256), [256,300). Rows: hand-placed documents with
  // length-1 ones (the last block's first query is in a document starting at 179, so key block
  // 0 is skipped there); one document filling the row; random lengths <= 40.
  const int T = 300;
  const std::vector<std::vector<int>> lens = {{1, 1, 5, 130, 1, 40, 1, 121}, {T}, random_lengths(T, 40, 77)};
  check_doc_case(make_layout(3, T, 2, 1, 8, 2, 0, 0), lens, 70, 120);
}

TEST(KernelsAttention, DocumentMaskedTensorParallelSplitKv) {
  // GQA under tp (rank 1 of 2, split kv heads) with packed rows.
  const int T = 140;
  // Row 0: a document starting exactly at 128 (block 1 skips key block 0); row 1 random.
  const std::vector<std::vector<int>> lens = {{1, 2, 3, 122, 12}, random_lengths(T, 9, 78)};
  check_doc_case(make_layout(2, T, 4, 1, 4, 4, 4, 1), lens, 80, 120);
}

TEST(KernelsAttention, DocumentMaskedLengthOneDocumentIsItsValue) {
  // Length-1 documents everywhere: softmax over one key, so out = v of the same row exactly.
  const int T = 133;
  Layout L = make_layout(1, T, 2, 2, 4, 1, 0, 0);
  const auto docs = doc_starts({std::vector<int>(T, 1)}, T);
  auto d_docs = to_device(docs);
  L.s.doc_start = d_docs.data();
  const auto qkv = random_normal(L.qkv_size(), 90);
  const auto r = run_attention<double>(L, qkv, nullptr);
  for (int i = 0; i < T; ++i)
    for (int c = 0; c < L.s.Hq * L.s.hd; ++c)
      EXPECT_EQ(r.out[static_cast<std::size_t>(i) * L.ldo + c], qkv[static_cast<std::size_t>(i) * L.ld + L.v_off() + c]);
}
