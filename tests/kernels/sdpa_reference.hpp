#pragma once
/// \brief The double-precision causal SDPA that test_sdpa_layout and test_sdpa_ragged check
/// the fused kernel's operand descriptions with: it reads and writes every operand only
/// through an SdpaLayout's head offset and strides, one sequence at a time from the element
/// offsets the description gives each sequence (dense rows: b * stride[0]; packed rows:
/// the ragged offsets of each document), as cuDNN does.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/sdpa_layout.hpp"

namespace meshtrain::test {

/// One sequence of the fused call: its length and the element offset of its first token in
/// each operand (q, k, v, out/dout, stats).
struct SdpaSeq {
  std::int64_t n = 0;
  std::int64_t q = 0, k = 0, v = 0, o = 0, stats = 0;
};

/// The sequences of a dense layout: B rows of T tokens, row b at b * stride[0].
inline std::vector<SdpaSeq> dense_sequences(const kernels::SdpaLayout& L) {
  std::vector<SdpaSeq> seqs;
  for (std::int64_t b = 0; b < L.q.dim[0]; ++b)
    seqs.push_back({L.q.dim[2], b * L.q.stride[0], b * L.k.stride[0], b * L.v.stride[0], b * L.o.stride[0],
                    b * L.stats.stride[0]});
  return seqs;
}

namespace detail {
/// Element (h, i, d) of an operand of the sequence starting at element `seq` of p.
template <class P>
P& at(P* p, const kernels::SdpaTensor& t, std::int64_t seq, std::int64_t h, std::int64_t i, std::int64_t d) {
  return p[t.offset + seq + h * t.stride[1] + i * t.stride[2] + d * t.stride[3]];
}
}  // namespace detail

/// Causal SDPA in double: query i of a sequence sees its keys j <= i; graph query head h reads
/// kv head h / (query heads / kv heads); lse (log-sum-exp of the scaled scores) through the
/// stats layout; dq, dk, dv (when dout is given) accumulated into zeroed buffers.
inline void sdpa_reference(const kernels::SdpaLayout& L, const std::vector<SdpaSeq>& seqs, double scale,
                           const double* q, const double* kk, const double* v, double* out, double* lse,
                           const double* dout, double* dq, double* dk, double* dv) {
  using detail::at;
  const std::int64_t H = L.q.dim[1], D = L.q.dim[3];
  const std::int64_t per_kv = H / L.kv_heads;
  for (const SdpaSeq& sq : seqs) {
    const std::int64_t n = sq.n;
    std::vector<double> p(static_cast<std::size_t>(n)), dp(static_cast<std::size_t>(n));
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / per_kv;
      for (std::int64_t i = 0; i < n; ++i) {
        double mx = -1e300;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::int64_t d = 0; d < D; ++d) s += at(q, L.q, sq.q, h, i, d) * at(kk, L.k, sq.k, g, j, d);
          p[j] = scale * s;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (std::int64_t j = 0; j <= i; ++j) p[j] /= sum;
        at(lse, L.stats, sq.stats, h, i, 0) = mx + std::log(sum);
        for (std::int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j <= i; ++j) o += p[j] * at(v, L.v, sq.v, g, j, d);
          at(out, L.o, sq.o, h, i, d) = o;
        }
        if (!dout) continue;
        // dP = dO V^T, dS = P (dP - sum P dP), dQ = scale dS K, dK += scale dS^T Q, dV += P^T dO.
        double pdp = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::int64_t d = 0; d < D; ++d) s += at(dout, L.o, sq.o, h, i, d) * at(v, L.v, sq.v, g, j, d);
          dp[j] = s;
          pdp += p[j] * s;
        }
        for (std::int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - pdp);
          for (std::int64_t d = 0; d < D; ++d) {
            at(dq, L.q, sq.q, h, i, d) += scale * ds * at(kk, L.k, sq.k, g, j, d);
            at(dk, L.k, sq.k, g, j, d) += scale * ds * at(q, L.q, sq.q, h, i, d);
            at(dv, L.v, sq.v, g, j, d) += p[j] * at(dout, L.o, sq.o, h, i, d);
          }
        }
      }
    }
  }
}

inline std::vector<double> random_vector(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

/// Largest |a - b| at most tol; a NaN fails outright.
inline void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what,
                         const char* name) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  std::size_t where = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - b[i]);
    if (std::isnan(e)) {
      worst = INFINITY, where = i;
      break;
    }
    if (e > worst) worst = e, where = i;
  }
  EXPECT_LE(worst, tol) << name << ": " << what << " differs by " << worst << " at " << where;
}

}  // namespace meshtrain::test
