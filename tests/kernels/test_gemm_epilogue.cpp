// GEMMs with epilogues (linalg/gemm_epilogue.hpp, gpu.epilogues): every epilogue in fp32
// and bf16 against a double-precision reference computed here, on several shapes (odd sizes,
// padded leading dimensions, every transpose the model uses); the backward epilogues of an
// MLP (dX with the GELU gradient, dW, the bias gradients) against central finite differences
// in double; the GEMM-then-pass form bit for bit the unfused kernels; run-to-run determinism.
// On a CUDA build the same tests check cuBLASLt's epilogues (the Auto path) against the same
// references.
#include <gtest/gtest.h>

#include <cmath>

#include "core/format.hpp"
#include "gemm_epilogue_reference.hpp"
#include "kernel_test_utils.hpp"
#include "kernels/elementwise.hpp"
#include "linalg/gemm.hpp"
#include "linalg/gemm_epilogue.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
using linalg::Epilogue;
using linalg::EpilogueImpl;
using linalg::EpilogueOperands;
using linalg::EpiloguePath;
using linalg::Op;

namespace {

using test::gelu_tanh_grad_ref;
using test::gelu_tanh_ref;

struct Shape {
  Op oa, ob;
  int m, n, k;
  int pad;  ///< extra elements in every leading dimension
  int rows_a() const { return oa == Op::N ? m : k; }
  int cols_a() const { return oa == Op::N ? k : m; }
  int rows_b() const { return ob == Op::N ? k : n; }
  int cols_b() const { return ob == Op::N ? n : k; }
  int lda() const { return cols_a() + pad; }
  int ldb() const { return cols_b() + pad; }
  int ldc() const { return n + pad; }
};

std::string name(const Shape& s) {
  return strprintf("%c%c m %d n %d k %d pad %d", s.oa == Op::N ? 'N' : 'T', s.ob == Op::N ? 'N' : 'T', s.m, s.n, s.k,
                   s.pad);
}

// The model's transposes (NN forward, NT for dX, TN for dW), odd sizes, padded strides, and
// two shapes whose strides and pointers cuBLASLt takes (multiples of 8, pool-aligned).
const Shape kShapes[] = {
    {Op::N, Op::N, 37, 53, 29, 3}, {Op::N, Op::T, 5, 13, 7, 1},  {Op::T, Op::N, 19, 24, 40, 0},
    {Op::T, Op::T, 9, 11, 6, 2},   {Op::N, Op::N, 64, 96, 48, 0}, {Op::N, Op::T, 64, 96, 48, 8},
    {Op::T, Op::N, 48, 64, 96, 0}, {Op::N, Op::N, 1, 8, 1, 0},
};

/// op(A) op(B) in double for stored (padded) A and B, and the sum of |products| per element.
void ref_product(const Shape& s, const std::vector<double>& a, const std::vector<double>& b, std::vector<double>& p,
                 std::vector<double>& absp) {
  test::gemm_ref(s.oa == Op::T, s.ob == Op::T, s.m, s.n, s.k, a.data(), s.lda(), b.data(), s.ldb(), p, &absp);
}

/// Element (i, j) of a stored (m, n; ld) matrix.
double at(const std::vector<double>& x, int ld, int i, int j) { return x[static_cast<std::size_t>(i) * ld + j]; }

/// |got - ref| <= tol * scale elementwise (scale: the magnitudes the result is made of).
void expect_within(const std::string& what, const std::vector<double>& got, const std::vector<double>& ref,
                   const std::vector<double>& scale, double tol) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(got[i] - ref[i]) <= tol * scale[i])) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs reference " << ref[i] << " (tol " << tol * scale[i]
                      << ")";
    }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " elements out of tolerance";
}

/// Tolerance relative to the scale: fp32 rounds the products and sums (k <= 96 terms), bf16
/// rounds the GEMM result, the bias sum and the activation (2^-9 each) to 8 bits. cuBLASLt's
/// GELU and its gradient (impl Fused, CUDA builds) may use the device's approximate tanh
/// (relative error 2^-11), which fp32 allows for there; the host's GELU is within 1 ulp.
template <class T>
double tol_of(EpilogueImpl impl = EpilogueImpl::GemmThenPass, bool gelu = false) {
  if (std::is_same_v<T, bf16>) return 1.2e-2;
  return impl == EpilogueImpl::Fused && gelu ? 2e-3 : 1e-5;
}

/// The stored (m, n; ld) block of a device matrix as doubles, row by row.
template <class T>
std::vector<double> block(const Buffer<T>& d, int m, int n, int ld) {
  const std::vector<double> all = download(d);
  std::vector<double> out(static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) out[static_cast<std::size_t>(i) * n + j] = all[static_cast<std::size_t>(i) * ld + j];
  return out;
}

/// Inputs of one shape, bf16-exact (so float and bf16 runs see the same numbers).
struct Inputs {
  std::vector<double> a, b, c0, bias, pre, bias_grad0;
  Inputs(const Shape& s, std::uint64_t seed) {
    a = bf16_exact(random_normal(static_cast<std::size_t>(s.rows_a()) * s.lda(), seed));
    b = bf16_exact(random_normal(static_cast<std::size_t>(s.rows_b()) * s.ldb(), seed + 1));
    c0 = bf16_exact(random_normal(static_cast<std::size_t>(s.m) * s.ldc(), seed + 2));
    bias = bf16_exact(random_normal(s.n, seed + 3));
    pre = bf16_exact(random_normal(static_cast<std::size_t>(s.m) * s.ldc(), seed + 4, 1.5));
    bias_grad0 = bf16_exact(random_normal(s.n, seed + 5, 0.5));
  }
};

// ---- Bias and BiasGelu ------------------------------------------------------------------
template <class T>
void check_forward(const Shape& s, Epilogue ep) {
  SCOPED_TRACE(name(s) + (ep == Epilogue::Bias ? " Bias" : " BiasGelu"));
  const Inputs in(s, 100 + s.m);
  // Bias exercises alpha and beta (C = alpha AB + beta C0 + bias); BiasGelu has beta 0.
  const float alpha = ep == Epilogue::Bias ? 0.75f : 1.0f, beta = ep == Epilogue::Bias ? 0.5f : 0.0f;
  auto da = upload<T>(in.a), db = upload<T>(in.b), dc = upload<T>(in.c0), dbias = upload<T>(in.bias);
  auto dpre = upload<T>(in.pre);
  EpilogueOperands<T> x;
  x.bias = dbias.data();
  x.pre = dpre.data();
  x.ld_pre = s.ldc();
  const EpilogueImpl impl = linalg::gemm_epilogue<T>(ep, s.oa, s.ob, s.m, s.n, s.k, alpha, da.data(), s.lda(), db.data(),
                                                     s.ldb(), beta, dc.data(), s.ldc(), x);
  std::vector<double> p, absp;
  ref_product(s, in.a, in.b, p, absp);
  std::vector<double> ref_c(p.size()), ref_pre(p.size()), scale(p.size());
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.n; ++j) {
      const std::size_t e = static_cast<std::size_t>(i) * s.n + j;
      const double h = alpha * p[e] + beta * at(in.c0, s.ldc(), i, j) + in.bias[j];
      ref_pre[e] = h;
      ref_c[e] = ep == Epilogue::Bias ? h : gelu_tanh_ref(h);
      scale[e] = absp[e] + std::fabs(at(in.c0, s.ldc(), i, j)) + std::fabs(in.bias[j]) + std::fabs(h) + 1e-3;
    }
  expect_within("C vs double", block(dc, s.m, s.n, s.ldc()), ref_c, scale, tol_of<T>(impl, ep == Epilogue::BiasGelu));
  if (ep == Epilogue::BiasGelu) expect_within("pre vs double", block(dpre, s.m, s.n, s.ldc()), ref_pre, scale, tol_of<T>());

  // The GEMM-then-pass form (the host twin; cuBLASLt's fallback) rounds like the unfused
  // kernels: bit for bit the GEMM, add_bias and gelu_forward.
  auto uc = upload<T>(in.c0), upre = upload<T>(in.pre);
  if (ep == Epilogue::Bias) {
    linalg::gemm<T>(s.oa, s.ob, s.m, s.n, s.k, alpha, da.data(), s.lda(), db.data(), s.ldb(), beta, uc.data(), s.ldc());
    kernels::add_bias(uc.data(), dbias.data(), s.m, s.n, s.ldc());
  } else {
    linalg::gemm<T>(s.oa, s.ob, s.m, s.n, s.k, 1.0f, da.data(), s.lda(), db.data(), s.ldb(), 0.0f, upre.data(), s.ldc());
    kernels::add_bias(upre.data(), dbias.data(), s.m, s.n, s.ldc());
    for (int i = 0; i < s.m; ++i)
      kernels::gelu_forward(upre.data() + static_cast<std::size_t>(i) * s.ldc(), uc.data() + static_cast<std::size_t>(i) * s.ldc(), s.n);
  }
  auto fc = upload<T>(in.c0), fpre = upload<T>(in.pre);
  x.pre = fpre.data();
  EXPECT_EQ(linalg::gemm_epilogue<T>(ep, s.oa, s.ob, s.m, s.n, s.k, alpha, da.data(), s.lda(), db.data(), s.ldb(), beta,
                                     fc.data(), s.ldc(), x, EpiloguePath::GemmThenPass),
            EpilogueImpl::GemmThenPass);
  EXPECT_TRUE(bitwise_equal(to_host(fc), to_host(uc))) << "GemmThenPass C vs the unfused kernels";
  EXPECT_TRUE(bitwise_equal(to_host(fpre), to_host(upre))) << "GemmThenPass pre vs the unfused kernels";
  if (impl == EpilogueImpl::GemmThenPass) {
    EXPECT_TRUE(bitwise_equal(to_host(dc), to_host(fc))) << "Auto took the GEMM then the pass: the same bits";
    EXPECT_TRUE(bitwise_equal(to_host(dpre), to_host(fpre)));
  }
  if (!linalg::gemm_epilogue_fused_built()) EXPECT_EQ(impl, EpilogueImpl::GemmThenPass);
}

// ---- DGeluBiasGrad and BiasGradB ----------------------------------------------------------
/// TC: C's type, T or (BiasGradB, a weight gradient) acc_t<T>. Bias gradients are acc_t<T>.
template <class T, class TC = T>
void check_backward(const Shape& s, Epilogue ep, bool with_bias_grad) {
  constexpr bool wide_c = !std::is_same_v<TC, T>;
  SCOPED_TRACE(name(s) + (ep == Epilogue::DGeluBiasGrad ? " DGeluBiasGrad" : " BiasGradB") +
               (with_bias_grad ? "" : " (no bias gradient)") + (wide_c ? " (fp32 C)" : ""));
  const Inputs in(s, 200 + s.n);
  const float beta = ep == Epilogue::BiasGradB ? 1.0f : 0.0f;  // a weight gradient accumulates
  auto da = upload<T>(in.a), db = upload<T>(in.b), dpre = upload<T>(in.pre);
  auto dc = upload<TC>(in.c0);
  auto dbg = upload<acc_t<T>>(in.bias_grad0);
  EpilogueOperands<T> x;
  x.pre = dpre.data();
  x.ld_pre = s.ldc();
  x.bias_grad = with_bias_grad ? dbg.data() : nullptr;
  const EpilogueImpl impl = linalg::gemm_epilogue<T>(ep, s.oa, s.ob, s.m, s.n, s.k, 1.0f, da.data(), s.lda(), db.data(),
                                                     s.ldb(), beta, dc.data(), s.ldc(), x);
  std::vector<double> p, absp;
  ref_product(s, in.a, in.b, p, absp);
  std::vector<double> ref_c(p.size()), scale(p.size());
  std::vector<double> ref_bg(in.bias_grad0), scale_bg(s.n);
  for (int j = 0; j < s.n; ++j) scale_bg[j] = std::fabs(in.bias_grad0[j]) + 1e-3;
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.n; ++j) {
      const std::size_t e = static_cast<std::size_t>(i) * s.n + j;
      if (ep == Epilogue::DGeluBiasGrad) {
        const double g = gelu_tanh_grad_ref(at(in.pre, s.ldc(), i, j));
        ref_c[e] = p[e] * g;
        scale[e] = (absp[e] + 1e-3) * (std::fabs(g) + 0.2);
        ref_bg[j] += ref_c[e];
        scale_bg[j] += scale[e];
      } else {
        ref_c[e] = p[e] + at(in.c0, s.ldc(), i, j);
        scale[e] = absp[e] + std::fabs(at(in.c0, s.ldc(), i, j)) + 1e-3;
      }
    }
  if (ep == Epilogue::BiasGradB)
    for (int q = 0; q < s.k; ++q)
      for (int j = 0; j < s.n; ++j) {
        ref_bg[j] += at(in.b, s.ldb(), q, j);
        scale_bg[j] += std::fabs(at(in.b, s.ldb(), q, j));
      }
  const bool gelu = ep == Epilogue::DGeluBiasGrad;
  // An fp32 C (bf16 operands) is as accurate as an fp32 GEMM's: a C rounded to bf16 fails.
  expect_within("C vs double", block(dc, s.m, s.n, s.ldc()), ref_c, scale, tol_of<TC>(impl, gelu));
  if (with_bias_grad) expect_within("bias gradient vs double", download(dbg), ref_bg, scale_bg, tol_of<T>(impl, gelu));
  else EXPECT_TRUE(bitwise_equal(download(dbg), in.bias_grad0)) << "no bias gradient asked: untouched";

  // GemmThenPass: bit for bit the GEMM, gelu_backward and bias_backward.
  auto uc = upload<TC>(in.c0);
  auto ubg = upload<acc_t<T>>(in.bias_grad0);
  if constexpr (wide_c) {
    linalg::gemm_acc<T>(s.oa, s.ob, s.m, s.n, s.k, 1.0f, da.data(), s.lda(), db.data(), s.ldb(), beta, uc.data(),
                        s.ldc());
  } else {
    linalg::gemm<T>(s.oa, s.ob, s.m, s.n, s.k, 1.0f, da.data(), s.lda(), db.data(), s.ldb(), beta, uc.data(), s.ldc());
    if (ep == Epilogue::DGeluBiasGrad) {
      for (int i = 0; i < s.m; ++i) {
        T* row = uc.data() + static_cast<std::size_t>(i) * s.ldc();
        kernels::gelu_backward(dpre.data() + static_cast<std::size_t>(i) * s.ldc(), row, row, s.n);
      }
      kernels::bias_backward(uc.data(), with_bias_grad ? ubg.data() : nullptr, s.m, s.n, s.ldc());
    }
  }
  if (ep == Epilogue::BiasGradB) kernels::bias_backward(db.data(), with_bias_grad ? ubg.data() : nullptr, s.k, s.n, s.ldb());
  auto fc = upload<TC>(in.c0);
  auto fbg = upload<acc_t<T>>(in.bias_grad0);
  x.bias_grad = with_bias_grad ? fbg.data() : nullptr;
  linalg::gemm_epilogue<T>(ep, s.oa, s.ob, s.m, s.n, s.k, 1.0f, da.data(), s.lda(), db.data(), s.ldb(), beta, fc.data(),
                           s.ldc(), x, EpiloguePath::GemmThenPass);
  EXPECT_TRUE(bitwise_equal(to_host(fc), to_host(uc))) << "GemmThenPass C vs the unfused kernels";
  EXPECT_TRUE(bitwise_equal(to_host(fbg), to_host(ubg))) << "GemmThenPass bias gradient vs the unfused kernels";
  if (impl == EpilogueImpl::GemmThenPass) {
    EXPECT_TRUE(bitwise_equal(to_host(dc), to_host(fc)));
    EXPECT_TRUE(bitwise_equal(to_host(dbg), to_host(fbg)));
  }
  // Run to run: the same bits.
  auto rc = upload<TC>(in.c0);
  auto rbg = upload<acc_t<T>>(in.bias_grad0);
  x.bias_grad = with_bias_grad ? rbg.data() : nullptr;
  linalg::gemm_epilogue<T>(ep, s.oa, s.ob, s.m, s.n, s.k, 1.0f, da.data(), s.lda(), db.data(), s.ldb(), beta, rc.data(),
                           s.ldc(), x);
  EXPECT_TRUE(bitwise_equal(to_host(rc), to_host(dc))) << "run to run";
  EXPECT_TRUE(bitwise_equal(to_host(rbg), to_host(dbg))) << "run to run (bias gradient)";
}

template <class T>
void check_all() {
  for (const Shape& s : kShapes) {
    check_forward<T>(s, Epilogue::Bias);
    check_forward<T>(s, Epilogue::BiasGelu);
    check_backward<T>(s, Epilogue::DGeluBiasGrad, true);
    check_backward<T>(s, Epilogue::DGeluBiasGrad, false);
    if (s.ob == Op::N) check_backward<T>(s, Epilogue::BiasGradB, true);
    // A weight gradient in fp32 from bf16 operands (the model's dW with its bias gradient).
    if constexpr (std::is_same_v<T, bf16>)
      if (s.ob == Op::N) check_backward<T, float>(s, Epilogue::BiasGradB, true);
  }
}

// ---- an MLP through the epilogues: forward, backward, finite differences ----------------
//   pre = X W1 + b1, act = gelu(pre)   (BiasGelu)      X (M, K), W1 (K, F)
//   Y = act W2 + b2                    (Bias)          W2 (F, K)
//   L = sum R * Y
// backward: dW2 += act^T R, db2 += colsum R            (BiasGradB)
//           dpre = (R W2^T) * gelu'(pre), db1 += colsum dpre   (DGeluBiasGrad)
//           dW1 += X^T dpre (GEMM), dX = dpre W1^T (GEMM)
struct Mlp {
  int M = 6, K = 5, F = 7;
  std::vector<double> x, w1, b1, w2, b2, r;
  Mlp() {
    x = bf16_exact(random_normal(static_cast<std::size_t>(M) * K, 11));
    w1 = bf16_exact(random_normal(static_cast<std::size_t>(K) * F, 12, 0.7));
    b1 = bf16_exact(random_normal(F, 13, 0.5));
    w2 = bf16_exact(random_normal(static_cast<std::size_t>(F) * K, 14, 0.7));
    b2 = bf16_exact(random_normal(K, 15, 0.5));
    r = bf16_exact(random_normal(static_cast<std::size_t>(M) * K, 16));
  }
  /// L in double, directly from the definition (independent of the code under test).
  double loss() const {
    double L = 0;
    for (int i = 0; i < M; ++i) {
      std::vector<double> act(F);
      for (int f = 0; f < F; ++f) {
        double h = b1[f];
        for (int q = 0; q < K; ++q) h += x[i * K + q] * w1[q * F + f];
        act[f] = gelu_tanh_ref(h);
      }
      for (int c = 0; c < K; ++c) {
        double y = b2[c];
        for (int f = 0; f < F; ++f) y += act[f] * w2[f * K + c];
        L += r[i * K + c] * y;
      }
    }
    return L;
  }
  struct Grads {
    std::vector<double> dx, dw1, db1, dw2, db2;
  };
  /// The gradients through gemm_epilogue in T (the weight and bias gradients accumulate onto
  /// zeros).
  template <class T>
  Grads backward() const {
    auto X = upload<T>(x), W1 = upload<T>(w1), B1 = upload<T>(b1), W2 = upload<T>(w2), B2 = upload<T>(b2);
    auto R = upload<T>(r);
    Buffer<T> pre(static_cast<std::size_t>(M) * F, MemCategory::Workspace), act(pre.size(), MemCategory::Workspace);
    Buffer<T> y(static_cast<std::size_t>(M) * K, MemCategory::Workspace);
    EpilogueOperands<T> f1;
    f1.bias = B1.data();
    f1.pre = pre.data();
    f1.ld_pre = F;
    linalg::gemm_epilogue<T>(Epilogue::BiasGelu, Op::N, Op::N, M, F, K, 1.0f, X.data(), K, W1.data(), F, 0.0f, act.data(), F, f1);
    EpilogueOperands<T> f2;
    f2.bias = B2.data();
    linalg::gemm_epilogue<T>(Epilogue::Bias, Op::N, Op::N, M, K, F, 1.0f, act.data(), F, W2.data(), K, 0.0f, y.data(), K, f2);
    // Parameter gradients in acc_t<T>, as the model keeps them (fp32 for bf16).
    auto dW1 = upload<acc_t<T>>(std::vector<double>(w1.size())), dB1 = upload<acc_t<T>>(std::vector<double>(F));
    auto dW2 = upload<acc_t<T>>(std::vector<double>(w2.size())), dB2 = upload<acc_t<T>>(std::vector<double>(K));
    Buffer<T> dpre(pre.size(), MemCategory::Workspace), dX(x.size(), MemCategory::Workspace);
    EpilogueOperands<T> g2;
    g2.bias_grad = dB2.data();
    linalg::gemm_epilogue<T>(Epilogue::BiasGradB, Op::T, Op::N, F, K, M, 1.0f, act.data(), F, R.data(), K, 1.0f, dW2.data(), K, g2);
    EpilogueOperands<T> g1;
    g1.pre = pre.data();
    g1.ld_pre = F;
    g1.bias_grad = dB1.data();
    linalg::gemm_epilogue<T>(Epilogue::DGeluBiasGrad, Op::N, Op::T, M, F, K, 1.0f, R.data(), K, W2.data(), K, 0.0f,
                             dpre.data(), F, g1);
    linalg::gemm_acc<T>(Op::T, Op::N, K, F, M, 1.0f, X.data(), K, dpre.data(), F, 1.0f, dW1.data(), F);
    linalg::gemm<T>(Op::N, Op::T, M, K, F, 1.0f, dpre.data(), F, W1.data(), F, 0.0f, dX.data(), K);
    return {download(dX), download(dW1), download(dB1), download(dW2), download(dB2)};
  }
};

}  // namespace

TEST(GemmEpilogue, Fp32AgainstDoubleAndUnfused) { check_all<float>(); }
TEST(GemmEpilogue, Bf16AgainstDoubleAndUnfused) { check_all<bf16>(); }
// double takes the GEMM then the pass on every build (the gradient checks' path).
TEST(GemmEpilogue, DoubleAgainstReference) {
  const Shape s{Op::N, Op::N, 7, 9, 5, 2};
  check_forward<double>(s, Epilogue::BiasGelu);
  check_backward<double>(s, Epilogue::DGeluBiasGrad, true);
  check_backward<double>(Shape{Op::T, Op::N, 7, 9, 5, 2}, Epilogue::BiasGradB, true);
}

TEST(GemmEpilogue, MlpBackwardMatchesFiniteDifferences) {
  Mlp mlp;
  const Mlp::Grads g = mlp.backward<double>();
  fd_check("dX", mlp.x, g.dx, [&] { return mlp.loss(); }, 30, 1);
  fd_check("dW1", mlp.w1, g.dw1, [&] { return mlp.loss(); }, 35, 2);
  fd_check("db1", mlp.b1, g.db1, [&] { return mlp.loss(); }, 7, 3);
  fd_check("dW2", mlp.w2, g.dw2, [&] { return mlp.loss(); }, 35, 4);
  fd_check("db2", mlp.b2, g.db2, [&] { return mlp.loss(); }, 5, 5);
}

// fp32 and bf16 backward of the same MLP against the double gradients (checked above).
TEST(GemmEpilogue, MlpBackwardFp32AndBf16MatchDouble) {
  Mlp mlp;
  const Mlp::Grads ref = mlp.backward<double>();
  const Mlp::Grads f = mlp.backward<float>();
  const Mlp::Grads b = mlp.backward<bf16>();
  const std::pair<const std::vector<double>*, const char*> parts[] = {
      {&ref.dx, "dX"}, {&ref.dw1, "dW1"}, {&ref.db1, "db1"}, {&ref.dw2, "dW2"}, {&ref.db2, "db2"}};
  const std::vector<double>* fs[] = {&f.dx, &f.dw1, &f.db1, &f.dw2, &f.db2};
  const std::vector<double>* bs[] = {&b.dx, &b.dw1, &b.db1, &b.dw2, &b.db2};
  for (int i = 0; i < 5; ++i) {
    expect_close(std::string("fp32 ") + parts[i].second, *fs[i], *parts[i].first, 1e-5, 1e-2);
    // bf16 rounds the activations and each gradient on the way (about 8 bits each).
    expect_bf16_close(std::string("bf16 ") + parts[i].second, *bs[i], *parts[i].first, 4e-2);
  }
}
