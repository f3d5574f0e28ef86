// Elementwise kernels: casts, axpy-like updates, bias, GELU, SwiGLU, sum of squares.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "kernel_test_utils.hpp"
#include "kernels/elementwise.hpp"
#include "../../src/kernels/swiglu_rows.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

double gelu_ref(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

template <class In, class Out>
void check_cast(const std::vector<double>& src) {
  const std::vector<In> in = convert<In>(src);
  auto d_in = to_device(in);
  Buffer<Out> d_out(src.size(), MemCategory::Workspace);
  k::cast<In, Out>(d_in.data(), d_out.data(), src.size());
  const std::vector<Out> out = to_host(d_out);
  for (std::size_t i = 0; i < src.size(); ++i) {
    // Exact: a cast is one conversion (bf16 rounds from float, the IEEE/RNE rule).
    const Out expect = convert<Out>({as_double(in[i])})[0];
    ASSERT_EQ(std::memcmp(&out[i], &expect, sizeof(Out)), 0) << "element " << i;
  }
}

}  // namespace

TEST(KernelsElementwise, CastAllPairs) {
  const auto src = random_normal(1000, 1, 3.0);
  check_cast<float, float>(src);
  check_cast<float, double>(src);
  check_cast<float, bf16>(src);
  check_cast<double, float>(src);
  check_cast<double, double>(src);
  check_cast<double, bf16>(src);
  check_cast<bf16, float>(src);
  check_cast<bf16, double>(src);
  check_cast<bf16, bf16>(src);
}

TEST(KernelsElementwise, AddScaleFill) {
  const std::size_t n = 1003;
  const auto y0 = random_normal(n, 2), x = random_normal(n, 3);
  auto dy = upload<double>(y0);
  auto dx = upload<double>(x);
  k::add_inplace(dy.data(), dx.data(), n);
  k::scale_inplace(dy.data(), n, -1.5);
  const auto got = download(dy);
  // Exact: the same two IEEE double operations as the reference.
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], (y0[i] + x[i]) * -1.5);
  k::fill(dy.data(), n, 0.25);
  for (double v : download(dy)) EXPECT_EQ(v, 0.25);
}

TEST(KernelsElementwise, FillUniformIsTheCounterHashOnEveryBackend) {
  const std::size_t n = 100003;
  auto d = upload<double>(std::vector<double>(n, 0.0));
  k::fill_uniform(d.data(), n, -1.0, 1.0, 7);
  const auto got = download(d);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    // Exact: the kernel's arithmetic is the host reference's (one multiply-add in double).
    ASSERT_EQ(got[i], -1.0 + 2.0 * k::uniform_at(7, i)) << "element " << i;
    ASSERT_GE(got[i], -1.0);
    ASSERT_LT(got[i], 1.0);
    sum += got[i];
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);  // uniform on [-1, 1): mean 0, standard error 0.0018
  // Another seed, other values; bf16 rounds the same values once.
  auto e = upload<double>(std::vector<double>(n, 0.0));
  k::fill_uniform(e.data(), n, -1.0, 1.0, 8);
  EXPECT_NE(download(e), got);
  Buffer<bf16> h(n, MemCategory::Workspace);
  k::fill_uniform(h.data(), n, -1.0, 1.0, 7);
  const std::vector<bf16> hb = to_host(h);
  for (std::size_t i = 0; i < 1000; ++i) ASSERT_EQ(static_cast<float>(hb[i]), static_cast<float>(bf16(static_cast<float>(got[i]))));
}

TEST(KernelsElementwise, AddBiasForwardAndGradient) {
  const int rows = 67, cols = 70, ld = 73;  // 70 columns: one full 64-column block and a tail
  auto y0 = random_normal(static_cast<std::size_t>(rows) * ld, 4);
  auto bias = random_normal(cols, 5);
  const auto w = random_normal(y0.size(), 6);
  auto forward = [&]() {
    auto dy = upload<double>(y0);
    auto db = upload<double>(bias);
    k::add_bias(dy.data(), db.data(), rows, cols, ld);
    return download(dy);
  };
  const auto y = forward();
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < ld; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * ld + c;
      // Exact: one addition; columns past `cols` (row padding) untouched.
      EXPECT_EQ(y[i], c < cols ? y0[i] + bias[c] : y0[i]);
    }
  // dL/dbias for L = sum(w * y): bias_backward of w, accumulated onto an initial value.
  const auto dbias0 = random_normal(cols, 7);
  auto dw = upload<double>(w);
  auto ddb = upload<double>(dbias0);
  k::bias_backward(dw.data(), ddb.data(), rows, cols, ld);
  const auto dbias = download(ddb);
  std::vector<double> grad(cols), host(cols);
  for (int c = 0; c < cols; ++c) {
    double s = 0;
    for (int r = 0; r < rows; ++r) s += w[static_cast<std::size_t>(r) * ld + c];
    host[c] = dbias0[c] + s;
    grad[c] = dbias[c] - dbias0[c];
  }
  // 1e-12: same sum in a different association order, double rounding only.
  expect_close("bias_backward vs host", dbias, host, 1e-12, 1e-3);
  fd_check("dbias", bias, grad, [&]() { return weighted_sum(w, forward()); }, 30, 8);
}

TEST(KernelsElementwise, GeluForwardBackward) {
  const std::size_t n = 517;
  auto x = random_normal(n, 10, 2.0);
  const auto w = random_normal(n, 11);
  auto forward = [&]() {
    auto dx = upload<double>(x);
    Buffer<double> dy(n, MemCategory::Workspace);
    k::gelu_forward(dx.data(), dy.data(), n);
    return download(dy);
  };
  std::vector<double> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = gelu_ref(x[i]);
  // 1e-14 with a floor of 1 (absolute 1e-14 for small outputs): the kernel evaluates
  // 0.5 (1 + tanh(u)) as sigmoid(2u); the reference's 1 + tanh(u) cancels for x < 0,
  // leaving an absolute error of ~eps |x| in the (small) output.
  expect_close("gelu_forward", forward(), host, 1e-14, 1.0);
  // In place (y == x).
  auto dx = upload<double>(x);
  k::gelu_forward(dx.data(), dx.data(), n);
  expect_close("gelu_forward in place", download(dx), host, 1e-14, 1.0);

  auto dxx = upload<double>(x);
  auto dw = upload<double>(w);
  Buffer<double> dgrad(n, MemCategory::Workspace);
  k::gelu_backward(dxx.data(), dw.data(), dgrad.data(), n);
  const auto grad = download(dgrad);
  fd_check("gelu dx", x, grad, [&]() { return weighted_sum(w, forward()); }, 40, 12);
  // dx may alias dy.
  k::gelu_backward(dxx.data(), dw.data(), dw.data(), n);
  EXPECT_TRUE(bitwise_equal(download(dw), grad));
}

TEST(KernelsElementwise, SwigluForwardBackward) {
  const int rows = 9, cols = 37, ld_in = 2 * cols + 3, ld_out = cols + 5;
  // gate = columns [0, cols), up = columns [cols, 2 cols) of one (rows, ld_in) buffer.
  auto gu = random_normal(static_cast<std::size_t>(rows) * ld_in, 20, 2.0);
  const auto w = random_normal(static_cast<std::size_t>(rows) * ld_out, 21);
  auto forward = [&]() {
    auto d = upload<double>(gu);
    auto out = upload<double>(std::vector<double>(w.size(), 0.0));
    k::swiglu_forward(d.data(), d.data() + cols, ld_in, out.data(), ld_out, rows, cols);
    return download(out);
  };
  const auto out = forward();
  std::vector<double> host(w.size(), 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      host[static_cast<std::size_t>(r) * ld_out + c] =
          silu_ref(gu[static_cast<std::size_t>(r) * ld_in + c]) * gu[static_cast<std::size_t>(r) * ld_in + cols + c];
  // 1e-14: the same formula in double (exp may differ in the last bit).
  expect_close("swiglu_forward", out, host, 1e-14, 1e-12);

  auto d = upload<double>(gu);
  auto dout = upload<double>(w);
  auto dgu = upload<double>(std::vector<double>(gu.size(), 0.0));
  k::swiglu_backward(d.data(), d.data() + cols, ld_in, dout.data(), ld_out, dgu.data(),
                     dgu.data() + cols, rows, cols);
  const auto grad = download(dgu);  // same layout as gu: [dgate | dup] per row
  fd_check("swiglu d(gate|up)", gu, grad, [&]() { return weighted_sum(w, forward()); }, 60, 22);
  // In place over the inputs (dgate == gate, dup == up).
  k::swiglu_backward(d.data(), d.data() + cols, ld_in, dout.data(), ld_out, d.data(), d.data() + cols,
                     rows, cols);
  const auto inplace = download(d);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < 2 * cols; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * ld_in + c;
      EXPECT_EQ(inplace[i], grad[i]);
    }
}

// ---- SwiGLU's packed GPU form, pack by pack on the host -------------------------------------
// On GPUs one thread moves each 16-byte pack of a row (swiglu_rows.hpp: swiglu_forward_pack,
// swiglu_backward_pack). Here those bodies run on the host for every pack of strided rows,
// in reverse order (each touches only its own pack), and must give the bits of the row form's
// arithmetic element by element, leave the columns between the rows alone, and agree with the
// kernel this build runs (bit for bit on host builds, where that is the row form).

namespace {

template <class T, int K>
void check_swiglu_packs() {
  using A = acc_t<T>;
  constexpr int rows = 5, cols = 48;                        // 6 bf16, 12 fp32, 24 fp64 packs
  constexpr int ld_in = 2 * cols + 16, ld_out = cols + 8;   // gaps between the rows
  constexpr int ppr = cols / K;
  static_assert(cols % K == 0, "whole packs");
  ASSERT_TRUE(k::detail::rows_in_packs(cols, sizeof(T), {ld_in, ld_out}, {}));
  const std::string what = std::string(sizeof(T) == 2 ? "bf16" : sizeof(T) == 4 ? "fp32" : "fp64") +
                           " K=" + std::to_string(K);
  const std::vector<T> in0 = convert<T>(random_normal(static_cast<std::size_t>(rows) * ld_in, 700 + K, 2.0));
  const std::vector<T> dout0 = convert<T>(random_normal(static_cast<std::size_t>(rows) * ld_out, 710 + K));
  const std::vector<T> sentinel_out = convert<T>(random_normal(static_cast<std::size_t>(rows) * ld_out, 720 + K));
  const std::vector<T> sentinel_in = convert<T>(random_normal(in0.size(), 730 + K));
  auto at = [](int r, int c, int ld) { return static_cast<std::size_t>(r) * ld + c; };

  // The row form's arithmetic, element by element, on the host.
  std::vector<T> want_out = sentinel_out, want_dgu = sentinel_in;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const A g = load(in0[at(r, c, ld_in)]), u = load(in0[at(r, cols + c, ld_in)]);
      want_out[at(r, c, ld_out)] = store<T>(k::detail::swiglu_value<A>(g, u));
      const auto gr = k::detail::swiglu_grads<A>(g, u, load(dout0[at(r, c, ld_out)]));
      want_dgu[at(r, c, ld_in)] = store<T>(gr.dgate);
      want_dgu[at(r, cols + c, ld_in)] = store<T>(gr.dup);
    }

  // The packed bodies.
  AlignedHost<T> in(in0), dout(dout0), out(sentinel_out), dgu(sentinel_in);
  for (std::int64_t i = std::int64_t(rows) * ppr - 1; i >= 0; --i) {
    k::detail::swiglu_forward_pack<K>(in.data(), in.data() + cols, ld_in, out.data(), ld_out, ppr, i);
    k::detail::swiglu_backward_pack<K>(in.data(), in.data() + cols, ld_in, dout.data(), ld_out, dgu.data(),
                                       dgu.data() + cols, ppr, i);
  }
  EXPECT_TRUE(bitwise_equal(out.vec(), want_out)) << what << " forward";
  EXPECT_TRUE(bitwise_equal(dgu.vec(), want_dgu)) << what << " backward";
  // In place: dgate over gate, dup over up (the gap columns keep the inputs).
  std::vector<T> want_inplace = in0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < 2 * cols; ++c) want_inplace[at(r, c, ld_in)] = want_dgu[at(r, c, ld_in)];
  for (std::int64_t i = std::int64_t(rows) * ppr - 1; i >= 0; --i)
    k::detail::swiglu_backward_pack<K>(in.data(), in.data() + cols, ld_in, dout.data(), ld_out, in.data(),
                                       in.data() + cols, ppr, i);
  EXPECT_TRUE(bitwise_equal(in.vec(), want_inplace)) << what << " backward in place";

  // The kernel this build runs, on the same operands.
  auto d_in = to_device(in0), d_dout = to_device(dout0), d_out = to_device(sentinel_out),
       d_dgu = to_device(sentinel_in);
  k::swiglu_forward(d_in.data(), d_in.data() + cols, ld_in, d_out.data(), ld_out, rows, cols);
  k::swiglu_backward(d_in.data(), d_in.data() + cols, ld_in, d_dout.data(), ld_out, d_dgu.data(),
                     d_dgu.data() + cols, rows, cols);
  if constexpr (kDeviceIsHost) {
    EXPECT_TRUE(bitwise_equal(to_host(d_out), want_out)) << what << " kernel forward";
    EXPECT_TRUE(bitwise_equal(to_host(d_dgu), want_dgu)) << what << " kernel backward";
  } else {  // the device's exp may differ from the host's in the last bit (then bf16 by an ulp)
    const double rtol = sizeof(T) == 2 ? 1e-2 : sizeof(T) == 4 ? 1e-5 : 1e-13;
    expect_close(what + " kernel forward", to_double(to_host(d_out)), to_double(want_out), rtol, 1e-6);
    expect_close(what + " kernel backward", to_double(to_host(d_dgu)), to_double(want_dgu), rtol, 1e-6);
  }
}

}  // namespace

TEST(KernelsElementwise, SwigluPackedFormPackByPackMatchesTheRowForm) {
  check_swiglu_packs<bf16, 8>();
  check_swiglu_packs<float, 4>();
  check_swiglu_packs<double, 2>();
  check_swiglu_packs<bf16, 1>();  // packs of one element: the row form's own loads
}

TEST(KernelsElementwise, SwigluPacksOnlyOnGpusAndWholeAlignedRows) {
  alignas(16) static bf16 m[64];
  // SmolLM2's MLP: gate|up rows of 2 x 1536, outputs of 1536 (and a tp slice of 768).
  EXPECT_TRUE(k::detail::rows_in_packs(1536, sizeof(bf16), {3072, 1536}, {m, m + 8}));
  EXPECT_TRUE(k::detail::rows_in_packs(768, sizeof(bf16), {1536, 768}, {m, m + 16}));
  EXPECT_FALSE(k::detail::rows_in_packs(1532, sizeof(bf16), {3072, 1536}, {m}));    // 191.5 packs
  EXPECT_FALSE(k::detail::rows_in_packs(1536, sizeof(bf16), {3070, 1536}, {m}));    // rows off 16 bytes
  EXPECT_FALSE(k::detail::rows_in_packs(1536, sizeof(bf16), {3072, 1536}, {m + 4})); // base off 16 bytes
  EXPECT_TRUE(k::detail::rows_in_packs(1536, sizeof(bf16), {3072, 1536}, {m, nullptr}));  // nullptr: unused
  EXPECT_FALSE(k::detail::rows_in_packs(0, sizeof(bf16), {}, {m}));
  // Host builds keep the row form, whose loops vectorize.
  EXPECT_EQ(k::detail::swiglu_rows_packable<bf16>(1536, 3072, 1536, {m}), !kDeviceIsHost);
}

TEST(KernelsElementwise, Fp32GeluSwigluAgainstReference) {
  // fp32 kernels (host: a polynomial exp instead of libm) against double references on
  // the same fp32-exact inputs, over a wide range (|x| up to ~15: deep into the tails).
  const std::size_t n = 4000;
  const auto x = to_double(convert<float>(random_normal(n, 60, 4.0)));
  const auto up = to_double(convert<float>(random_normal(n, 61)));
  const auto dy = to_double(convert<float>(random_normal(n, 62)));
  auto dx = upload<float>(x), dup = upload<float>(up), ddy = upload<float>(dy);
  Buffer<float> y(n, MemCategory::Workspace), g1(n, MemCategory::Workspace), g2(n, MemCategory::Workspace);
  const double c = std::sqrt(2.0 / M_PI);
  auto u_of = [&](double v) { return c * (v + 0.044715 * v * v * v); };
  // |got - ref| <= 8 * 2^-24 * (1 + |z|) * mag, z = the argument of exp, mag = the sum of
  // the magnitudes of the terms that make up the result (|ref| when there is one term):
  // a few fp32 roundings, amplified by exp's condition number |z| (an fp32 rounding of z
  // moves exp(z) by |z| 2^-24 relative: any fp32 implementation has this), and absolute
  // near the zeros of the derivatives (gelu' at x ~ -0.75, silu' at x ~ -1.28), where
  // the terms cancel; plus 1e-30 absolute: in the far tail (x < -9) the sigmoid itself is
  // ~1e-38, fp32's subnormal range, where products lose their precision.
  // A libm-grade exp (<= 1-2 ulp) is needed to pass.
  auto check = [&](const char* what, const std::vector<double>& got, const std::vector<double>& ref,
                   const std::vector<double>& mag, const std::function<double(std::size_t)>& z) {
    int bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double tol = 8 * std::ldexp(1.0, -24) * (1 + std::fabs(z(i))) * mag[i] + 1e-30;
      if (!(std::fabs(got[i] - ref[i]) <= tol) && ++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "] x=" << x[i] << ": " << got[i] << " vs " << ref[i];
    }
    EXPECT_EQ(bad, 0) << what;
  };
  auto z_gelu = [&](std::size_t i) { return 2 * u_of(x[i]); };
  auto z_silu = [&](std::size_t i) { return x[i]; };
  auto magnitude = [](const std::vector<double>& v) {
    std::vector<double> m(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) m[i] = std::fabs(v[i]);
    return m;
  };
  std::vector<double> ref(n), ref2(n), mag(n);
  k::gelu_forward(dx.data(), y.data(), n);
  for (std::size_t i = 0; i < n; ++i) ref[i] = x[i] / (1.0 + std::exp(-2.0 * u_of(x[i])));
  check("fp32 gelu_forward", download(y), ref, magnitude(ref), z_gelu);
  k::gelu_backward(dx.data(), ddy.data(), g1.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-2.0 * u_of(x[i])));
    const double t2 = 2.0 * x[i] * s * (1 - s) * c * (1 + 3 * 0.044715 * x[i] * x[i]);
    ref[i] = dy[i] * (s + t2);
    mag[i] = std::fabs(dy[i]) * (s + std::fabs(t2));
  }
  check("fp32 gelu_backward", download(g1), ref, mag, z_gelu);
  k::swiglu_forward(dx.data(), dup.data(), 0, y.data(), 0, 1, static_cast<int>(n));
  for (std::size_t i = 0; i < n; ++i) ref[i] = silu_ref(x[i]) * up[i];
  check("fp32 swiglu_forward", download(y), ref, magnitude(ref), z_silu);
  k::swiglu_backward(dx.data(), dup.data(), 0, ddy.data(), 0, g1.data(), g2.data(), 1, static_cast<int>(n));
  for (std::size_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-x[i]));
    ref[i] = dy[i] * up[i] * s * (1 + x[i] * (1 - s));
    mag[i] = std::fabs(dy[i] * up[i]) * s * (1 + std::fabs(x[i] * (1 - s)));
    ref2[i] = dy[i] * x[i] * s;
  }
  check("fp32 swiglu dgate", download(g1), ref, mag, z_silu);
  check("fp32 swiglu dup", download(g2), ref2, magnitude(ref2), z_silu);
}

TEST(KernelsElementwise, SumSquares) {
  const std::size_t n = 10007;
  const auto x = random_normal(n, 30);
  double host = 0;
  for (double v : x) host += v * v;
  auto dd = upload<double>(x);
  // 1e-13: a sum of 1e4 positive terms in another order (relative error <= n eps).
  EXPECT_LT(rel_err(k::sum_squares(dd.data(), n), host), 1e-13);
  auto df = upload<float>(x);
  double hostf = 0;
  for (float v : convert<float>(x)) hostf += static_cast<double>(v) * v;
  // 1e-13: float inputs are squared and summed in double, like the reference.
  EXPECT_LT(rel_err(k::sum_squares(df.data(), n), hostf), 1e-13);
  auto db = upload<bf16>(x);
  double hostb = 0;
  for (bf16 v : convert<bf16>(x)) hostb += as_double(v) * as_double(v);
  EXPECT_LT(rel_err(k::sum_squares(db.data(), n), hostb), 1e-13);
  EXPECT_EQ(k::sum_squares(dd.data(), 0), 0.0);
  // Deterministic: the same value, bit for bit.
  const double a = k::sum_squares(dd.data(), n), b = k::sum_squares(dd.data(), n);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
  // NaN and Inf propagate (the grad-norm check relies on it).
  auto xn = x;
  xn[5000] = std::numeric_limits<double>::quiet_NaN();
  auto dn = upload<float>(xn);
  EXPECT_TRUE(std::isnan(k::sum_squares(dn.data(), n)));
  xn[5000] = std::numeric_limits<double>::infinity();
  auto di = upload<float>(xn);
  EXPECT_TRUE(std::isinf(k::sum_squares(di.data(), n)));
}

TEST(KernelsElementwise, Bf16MatchesFloat) {
  const int rows = 33, cols = 70, ld = 72;
  const auto x = bf16_exact(random_normal(static_cast<std::size_t>(rows) * ld, 40, 2.0));
  const auto bias = bf16_exact(random_normal(cols, 41));
  const auto dy = bf16_exact(random_normal(x.size(), 42));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    std::vector<std::vector<double>> outs;
    auto dx = upload<T>(x);
    auto db = upload<T>(bias);
    auto ddy = upload<T>(dy);
    Buffer<T> y(x.size(), MemCategory::Workspace);
    k::gelu_forward(dx.data(), y.data(), x.size());
    outs.push_back(download(y));
    k::gelu_backward(dx.data(), ddy.data(), y.data(), x.size());
    outs.push_back(download(y));
    auto zero = upload<T>(std::vector<double>(x.size(), 0.0));
    k::swiglu_forward(dx.data(), dx.data() + 32, ld, zero.data(), ld, rows, 32);
    outs.push_back(download(zero));
    auto g = upload<T>(std::vector<double>(x.size(), 0.0));
    k::swiglu_backward(dx.data(), dx.data() + 32, ld, ddy.data(), ld, g.data(), g.data() + 32, rows, 32);
    outs.push_back(download(g));
    auto yb = upload<T>(x);
    k::add_bias(yb.data(), db.data(), rows, cols, ld);
    outs.push_back(download(yb));
    auto dbias = upload<acc_t<T>>(std::vector<double>(cols, 0.0));  // a parameter gradient: fp32 for bf16
    k::bias_backward(ddy.data(), dbias.data(), rows, cols, ld);
    outs.push_back(download(dbias));
    return outs;
  };
  const auto f = run(float{});
  const auto b = run(bf16{});
  const char* names[] = {"gelu_forward", "gelu_backward", "swiglu_forward", "swiglu_backward",
                         "add_bias", "bias_backward"};
  for (std::size_t i = 0; i < f.size(); ++i) expect_bf16_close(names[i], b[i], f[i]);
}

TEST(KernelsElementwise, BiasBackwardDeterministic) {
  const int rows = 513, cols = 300, ld = 300;
  const auto dy = random_normal(static_cast<std::size_t>(rows) * ld, 50);
  auto d = upload<float>(dy);
  auto run = [&]() {
    auto db = upload<float>(std::vector<double>(cols, 0.0));
    k::bias_backward(d.data(), db.data(), rows, cols, ld);
    return to_host(db);
  };
  EXPECT_TRUE(bitwise_equal(run(), run()));
}
