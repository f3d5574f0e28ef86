// The mixed-precision GEMM (linalg::gemm with bf16 A and B and an fp32 C; issue 33's fp32
// weight-gradient output): every transpose, odd sizes and padded strides, alpha and beta,
// against a double reference on bf16-exact inputs; on host builds bit for bit SGEMM of the
// widened operands; and a gradient accumulated over chunks with beta = 1 keeps fp32 accuracy,
// where the same accumulation in a bf16 C (linalg::gemm<bf16>) rounds after every chunk.
#include <gtest/gtest.h>

#include <cmath>

#include "gemm_epilogue_reference.hpp"
#include "kernel_test_utils.hpp"
#include "linalg/gemm.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
using linalg::Op;

namespace {

struct Case {
  Op oa, ob;
  int m, n, k, pad;
  int lda() const { return (oa == Op::N ? k : m) + pad; }
  int ldb() const { return (ob == Op::N ? n : k) + pad; }
  int ldc() const { return n + pad; }
  std::size_t a_size() const { return static_cast<std::size_t>(oa == Op::N ? m : k) * lda(); }
  std::size_t b_size() const { return static_cast<std::size_t>(ob == Op::N ? k : n) * ldb(); }
};

const Case kCases[] = {{Op::N, Op::N, 37, 53, 29, 3}, {Op::N, Op::T, 16, 24, 40, 0}, {Op::T, Op::N, 64, 96, 300, 8},
                       {Op::T, Op::T, 5, 7, 9, 1},    {Op::N, Op::N, 1, 1, 1, 0}};

}  // namespace

TEST(GemmMixed, MatchesDoubleReference) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(testing::Message() << (c.oa == Op::N ? 'N' : 'T') << (c.ob == Op::N ? 'N' : 'T') << " m " << c.m << " n "
                                    << c.n << " k " << c.k);
    const auto a = bf16_exact(random_normal(c.a_size(), 1)), b = bf16_exact(random_normal(c.b_size(), 2));
    const auto c0 = random_normal(static_cast<std::size_t>(c.m) * c.ldc(), 3);
    auto da = upload<bf16>(a), db = upload<bf16>(b);
    auto dc = upload<float>(c0);
    linalg::gemm(c.oa, c.ob, c.m, c.n, c.k, 0.75f, da.data(), c.lda(), db.data(), c.ldb(), 1.0f, dc.data(), c.ldc());
    std::vector<double> p, absp;
    gemm_ref(c.oa == Op::T, c.ob == Op::T, c.m, c.n, c.k, a.data(), c.lda(), b.data(), c.ldb(), p, &absp);
    const std::vector<double> got = download(dc);
    const std::vector<float> c0f = convert<float>(c0);
    int bad = 0;
    for (int i = 0; i < c.m; ++i)
      for (int j = 0; j < c.ldc(); ++j) {
        const std::size_t e = static_cast<std::size_t>(i) * c.ldc() + j;
        if (j >= c.n) {  // stride padding: untouched
          EXPECT_EQ(got[e], static_cast<double>(c0f[e]));
          continue;
        }
        const std::size_t ij = static_cast<std::size_t>(i) * c.n + j;
        const double ref = 0.75 * p[ij] + c0f[e];
        // fp32 products of bf16 values are exact; the fp32 sum of k terms rounds (k <= 300).
        if (!(std::fabs(got[e] - ref) <= 1e-5 * (0.75 * absp[ij] + std::fabs(c0f[e]) + 1e-3)) && ++bad <= 5)
          ADD_FAILURE() << "(" << i << ", " << j << "): " << got[e] << " vs " << ref;
      }
    EXPECT_EQ(bad, 0);
    if (kDeviceIsHost) {
      // The host twin is SGEMM of the widened operands, bit for bit.
      auto fa = upload<float>(a), fb = upload<float>(b);
      auto fc = upload<float>(c0);
      linalg::gemm<float>(c.oa, c.ob, c.m, c.n, c.k, 0.75f, fa.data(), c.lda(), fb.data(), c.ldb(), 1.0f, fc.data(), c.ldc());
      EXPECT_TRUE(bitwise_equal(to_host(fc), to_host(dc)));
    }
  }
}

// A weight gradient dW (C, F) += X_i^T dY_i over 16 chunks of rows (micro-steps or LM-head
// chunks). In fp32 its error stays at fp32 rounding; in a bf16 C every chunk's sum is rounded
// to 8 bits, which the test reports beside it.
TEST(GemmMixed, AccumulatesChunksInFp32) {
  const int C = 48, F = 64, rows = 32, chunks = 16;
  const auto x = bf16_exact(random_normal(static_cast<std::size_t>(rows) * chunks * C, 4));
  const auto dy = bf16_exact(random_normal(static_cast<std::size_t>(rows) * chunks * F, 5, 0.1));
  auto dx = upload<bf16>(x), ddy = upload<bf16>(dy);
  auto g32 = upload<float>(std::vector<double>(static_cast<std::size_t>(C) * F));
  auto g16 = upload<bf16>(std::vector<double>(static_cast<std::size_t>(C) * F));
  for (int ch = 0; ch < chunks; ++ch) {
    const bf16* xa = dx.data() + static_cast<std::size_t>(ch) * rows * C;
    const bf16* ya = ddy.data() + static_cast<std::size_t>(ch) * rows * F;
    linalg::gemm(Op::T, Op::N, C, F, rows, 1.0f, xa, C, ya, F, 1.0f, g32.data(), F);
    linalg::gemm<bf16>(Op::T, Op::N, C, F, rows, 1.0f, xa, C, ya, F, 1.0f, g16.data(), F);
  }
  std::vector<double> ref, absp;
  gemm_ref(true, false, C, F, rows * chunks, x.data(), C, dy.data(), F, ref, &absp);
  const std::vector<double> a32 = download(g32), a16 = download(g16);
  double e32 = 0, e16 = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    e32 = std::max(e32, std::fabs(a32[i] - ref[i]) / (absp[i] + 1e-6));
    e16 = std::max(e16, std::fabs(a16[i] - ref[i]) / (absp[i] + 1e-6));
  }
  std::printf("worst error over %d chunks, of the sum of |terms|: fp32 C %.2e, bf16 C %.2e\n", chunks, e32, e16);
  EXPECT_LT(e32, 1e-5);
}
