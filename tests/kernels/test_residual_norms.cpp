// Residual add fused with LayerNorm / RMSNorm (gpu.fused_norms): forward against a double
// reference and bitwise against the unfused kernels (add_bias, add_inplace, the norm),
// backward against finite differences of the whole fused operation (h and y both outputs,
// as in a block where h continues as the residual stream), against the unfused backward
// within fp32 rounding, and bitwise run to run. Both forms (kernels::NormForm): Rows, the
// host form, and Warps, the GPU form, run here on the host against the same references.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_utils.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/norms.hpp"
#include "kernels/residual_norms.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

// 150 rows: two full 64-row blocks of the backward's partials and a 22-row tail;
// 70 columns: a full 64-column block plus a tail.
// The Warps form moves rows in 16-byte packs where every row starts on 16 bytes
// (kernels::norm_rows_packable): at 70 columns only double rows (560 bytes) do; at
// kPackedC = 72 bf16 (144 bytes), fp32 and double rows do; at 69 none do.
constexpr int kN = 150, kC = 70, kPackedC = 72;
constexpr double kEps = 1e-5;

/// The operands of one fused call: sublayer output a, residual x, bias, norm weight/bias;
/// the backward's incoming gradients wy (of y) and wh (of h: the residual stream's).
/// a, x, wy, wh: (n, C).
struct Operands {
  int n = kN;
  int C = kC;
  std::vector<double> a, x, bias, w, b, wy, wh;
};
Operands operands(std::uint64_t seed, int n = kN, int C = kC) {
  Operands o;
  o.n = n;
  o.C = C;
  o.a = random_normal(static_cast<std::size_t>(n) * o.C, seed);
  o.x = random_normal(o.a.size(), seed + 1);
  // A large common offset per row: a one-pass variance would lose digits.
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < o.C; ++c) o.x[static_cast<std::size_t>(i) * o.C + c] += 3.0 * (i % 3);
  o.bias = random_normal(o.C, seed + 2);
  o.w = random_normal(o.C, seed + 3);
  o.b = random_normal(o.C, seed + 4);
  o.wy = random_normal(o.a.size(), seed + 5);
  o.wh = random_normal(o.a.size(), seed + 6);
  return o;
}

/// Double reference of the forward: h = a + bias + x; y = norm(h); returns sum(wy y) + sum(wh h).
double reference_loss(const Operands& o, bool layernorm, bool with_bias) {
  double L = 0;
  std::vector<double> h(o.C);
  for (int i = 0; i < o.n; ++i) {
    const std::size_t r = static_cast<std::size_t>(i) * o.C;
    double m = 0, v = 0;
    for (int c = 0; c < o.C; ++c) {
      h[c] = o.a[r + c] + (with_bias ? o.bias[c] : 0.0) + o.x[r + c];
      m += h[c];
    }
    m = layernorm ? m / o.C : 0.0;
    for (int c = 0; c < o.C; ++c) v += (h[c] - m) * (h[c] - m);
    const double rs = 1.0 / std::sqrt(v / o.C + kEps);
    for (int c = 0; c < o.C; ++c) {
      const double y = (h[c] - m) * rs * o.w[c] + (layernorm ? o.b[c] : 0.0);
      L += o.wy[r + c] * y + o.wh[r + c] * h[c];
    }
  }
  return L;
}

struct Out {
  std::vector<double> h, y, stats;                 // forward: h, y, mean|rstd (or rstd)
  std::vector<double> dx, dw, db, dbias;            // backward (dx = dL/dh = dL/da = dL/dx)
};

/// The fused kernels in type T and form `form`. Parameter gradients start from `init` (they
/// accumulate).
template <class T>
Out run_fused(const Operands& o, bool layernorm, bool with_bias, bool params, double init = 0.0,
              k::NormForm form = k::default_norm_form()) {
  using A = acc_t<T>;
  const int n = o.n;
  auto h = upload<T>(o.a), x = upload<T>(o.x), bias = upload<T>(o.bias), w = upload<T>(o.w), b = upload<T>(o.b);
  Buffer<T> y(o.a.size(), MemCategory::Workspace);
  Buffer<A> mean(n, MemCategory::Workspace), rstd(n, MemCategory::Workspace);
  if (layernorm)
    k::residual_layernorm_forward(h.data(), x.data(), with_bias ? bias.data() : nullptr, w.data(), b.data(), kEps, n,
                                  o.C, y.data(), mean.data(), rstd.data(), form);
  else
    k::residual_rmsnorm_forward(h.data(), x.data(), w.data(), kEps, n, o.C, y.data(), rstd.data(), form);
  Out r;
  r.h = download(h);
  r.y = download(y);
  if (layernorm) r.stats = to_double(to_host(mean));
  for (double v : to_double(to_host(rstd))) r.stats.push_back(v);
  auto dy = upload<T>(o.wy), dx = upload<T>(o.wh);
  const std::vector<double> init_c(o.C, init);
  auto dw = upload<A>(init_c), db = upload<A>(init_c), dbias = upload<A>(init_c);  // parameter gradients: acc_t<T>
  if (layernorm)
    k::residual_layernorm_backward(dy.data(), h.data(), w.data(), mean.data(), rstd.data(), n, o.C, dx.data(),
                                   params ? dw.data() : nullptr, params ? db.data() : nullptr,
                                   params && with_bias ? dbias.data() : nullptr, form);
  else
    k::residual_rmsnorm_backward(dy.data(), h.data(), w.data(), rstd.data(), n, o.C, dx.data(),
                                 params ? dw.data() : nullptr, form);
  r.dx = download(dx);
  r.dw = download(dw);
  r.db = download(db);
  r.dbias = download(dbias);
  return r;
}

/// The unfused path the model ran before: add_bias, add_inplace, the norm; its backward and
/// bias_backward; the norms in form `form`.
template <class T>
Out run_unfused(const Operands& o, bool layernorm, bool with_bias, k::NormForm form = k::default_norm_form()) {
  using A = acc_t<T>;
  const int n = o.n;
  auto h = upload<T>(o.a), x = upload<T>(o.x), bias = upload<T>(o.bias), w = upload<T>(o.w), b = upload<T>(o.b);
  Buffer<T> y(o.a.size(), MemCategory::Workspace);
  Buffer<A> mean(n, MemCategory::Workspace), rstd(n, MemCategory::Workspace);
  if (with_bias) k::add_bias(h.data(), bias.data(), n, o.C, o.C);
  k::add_inplace(h.data(), x.data(), o.a.size());
  if (layernorm)
    k::layernorm_forward(h.data(), w.data(), b.data(), kEps, n, o.C, y.data(), mean.data(), rstd.data(), form);
  else
    k::rmsnorm_forward(h.data(), w.data(), kEps, n, o.C, y.data(), rstd.data(), form);
  Out r;
  r.h = download(h);
  r.y = download(y);
  if (layernorm) r.stats = to_double(to_host(mean));
  for (double v : to_double(to_host(rstd))) r.stats.push_back(v);
  auto dy = upload<T>(o.wy), dx = upload<T>(o.wh);
  const std::vector<double> zero(o.C, 0.0);
  auto dw = upload<A>(zero), db = upload<A>(zero), dbias = upload<A>(zero);
  if (layernorm) {
    k::layernorm_backward(dy.data(), h.data(), w.data(), mean.data(), rstd.data(), n, o.C, dx.data(), dw.data(),
                          db.data(), form);
    if (with_bias) k::bias_backward(dx.data(), dbias.data(), n, o.C, o.C);
  } else {
    k::rmsnorm_backward(dy.data(), h.data(), w.data(), rstd.data(), n, o.C, dx.data(), dw.data(), form);
  }
  r.dx = download(dx);
  r.dw = download(dw);
  r.db = download(db);
  r.dbias = download(dbias);
  return r;
}

void check_against_finite_differences(bool layernorm, bool with_bias, k::NormForm form = k::NormForm::Rows,
                                      int C = kC) {
  Operands o = operands(layernorm ? 10 : 20, kN, C);
  const Out r = run_fused<double>(o, layernorm, with_bias, true, 0.5, form);
  const auto loss = [&]() { return reference_loss(o, layernorm, with_bias); };
  // dL/da = dL/dx = dL/dh (the residual add passes it through): the kernel's dx.
  fd_check("da", o.a, r.dx, loss, 60, 1);
  fd_check("dresidual", o.x, r.dx, loss, 60, 2);
  std::vector<double> dw(o.C), db(o.C), dbias(o.C);
  for (int c = 0; c < o.C; ++c) {  // the parameter gradients accumulated onto 0.5
    dw[c] = r.dw[c] - 0.5;
    db[c] = r.db[c] - 0.5;
    dbias[c] = r.dbias[c] - 0.5;
  }
  fd_check("dw", o.w, dw, loss, o.C, 3);
  if (layernorm) fd_check("db", o.b, db, loss, o.C, 4);
  if (with_bias) fd_check("dbias", o.bias, dbias, loss, o.C, 5);
}

/// The LayerNorm forward of `form` on n rows against the double formula.
void check_layernorm_forward(k::NormForm form, int n, int C = kC) {
  const Operands o = operands(1, n, C);
  const Out r = run_fused<double>(o, true, true, true, 0.0, form);
  std::vector<double> h(o.a.size());
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < o.C; ++c) {
      const std::size_t j = static_cast<std::size_t>(i) * o.C + c;
      h[j] = o.a[j] + o.bias[c] + o.x[j];
    }
  // 1e-15: the same additions in double.
  expect_close("h", r.h, h, 1e-15, 1e-12);
  // y from the reference loss's formula: compare through weights wy = e_j is too costly;
  // recompute it here.
  std::vector<double> y(h.size());
  for (int i = 0; i < n; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < o.C; ++c) m += h[static_cast<std::size_t>(i) * o.C + c];
    m /= o.C;
    for (int c = 0; c < o.C; ++c) v += std::pow(h[static_cast<std::size_t>(i) * o.C + c] - m, 2);
    const double rs = 1.0 / std::sqrt(v / o.C + kEps);
    for (int c = 0; c < o.C; ++c) {
      const std::size_t j = static_cast<std::size_t>(i) * o.C + c;
      y[j] = (h[j] - m) * rs * o.w[c] + o.b[c];
    }
  }
  // 1e-12 of the O(1) scale (floor 1): two-pass statistics in double, summation order aside;
  // y near 0 is a difference of O(1) terms, so its error is absolute.
  expect_close("y", r.y, y, 1e-12, 1.0);
}

/// Fused against unfused in one form: bit for bit on host builds, where both kernels compile
/// to the same arithmetic; on GPUs nvcc may contract multiply-adds differently in the two
/// kernels, so there within one rounding (fp32: 1e-6 of the O(1) scale; bf16: a bf16
/// rounding, expect_bf16_close).
void expect_same_arithmetic(const std::string& what, const std::vector<double>& fused,
                            const std::vector<double>& unfused, bool bf16_values) {
  if (kDeviceIsHost) {
    EXPECT_TRUE(bitwise_equal(fused, unfused)) << what;
  } else if (bf16_values) {
    expect_bf16_close(what, fused, unfused);
  } else {
    expect_close(what, fused, unfused, 1e-6, 1.0);
  }
}

/// Both forms; each compares fused with unfused kernels of its own form.
constexpr k::NormForm kForms[] = {k::NormForm::Rows, k::NormForm::Warps};

}  // namespace

TEST(KernelsResidualNorms, LayerNormForwardAgainstReference) { check_layernorm_forward(k::NormForm::Rows, kN); }

TEST(KernelsResidualNorms, LayerNormBackwardFiniteDifferences) { check_against_finite_differences(true, true); }
TEST(KernelsResidualNorms, LayerNormWithoutBiasFiniteDifferences) { check_against_finite_differences(true, false); }
TEST(KernelsResidualNorms, RmsNormBackwardFiniteDifferences) { check_against_finite_differences(false, false); }

namespace {

/// Fused against unfused, fp32 and bf16, for both column counts (the Warps form in packs at
/// kPackedC, element by element at kC), both forms and both norms (LayerNorm with GPT-2's
/// bias): check(tag, layernorm, fp32 fused, fp32 unfused, bf16 fused, bf16 unfused).
template <class Check>
void fused_against_unfused(std::uint64_t seed, const Check& check) {
  for (int C : {kC, kPackedC}) {
    const Operands o = operands(seed, kN, C);
    for (k::NormForm form : kForms)
      for (bool layernorm : {true, false}) {
        const bool with_bias = layernorm;
        const std::string tag = std::string(layernorm ? "layernorm" : "rmsnorm") +
                                (form == k::NormForm::Warps ? ", warps" : ", rows") + ", C " + std::to_string(C);
        check(tag, layernorm, run_fused<float>(o, layernorm, with_bias, true, 0.0, form),
              run_unfused<float>(o, layernorm, with_bias, form),
              run_fused<bf16>(o, layernorm, with_bias, true, 0.0, form), run_unfused<bf16>(o, layernorm, with_bias, form));
      }
  }
}

}  // namespace

TEST(KernelsResidualNorms, ForwardBitwiseTheUnfusedPath) {
  // The residual add rounds like add_bias then add_inplace, and the statistics read the
  // stored h in the same order: on host the fused forward is the unfused one bit for bit,
  // in either form.
  fused_against_unfused(2, [](const std::string& tag, bool, const Out& f, const Out& u, const Out& fb, const Out& ub) {
    EXPECT_TRUE(bitwise_equal(f.h, u.h)) << "fp32 h, " << tag;  // elementwise: the same two roundings anywhere
    expect_same_arithmetic("fp32 y, " + tag, f.y, u.y, false);
    expect_same_arithmetic("fp32 statistics, " + tag, f.stats, u.stats, false);
    EXPECT_TRUE(bitwise_equal(fb.h, ub.h)) << "bf16 h, " << tag;
    expect_same_arithmetic("bf16 y, " + tag, fb.y, ub.y, true);
  });
}

TEST(KernelsResidualNorms, BackwardMatchesTheUnfusedPath) {
  fused_against_unfused(3, [](const std::string& tag, bool layernorm, const Out& f, const Out& u, const Out& fb,
                              const Out& ub) {
    // dx: the same per-row formula and row sums: bitwise (on host).
    expect_same_arithmetic("fp32 dx, " + tag, f.dx, u.dx, false);
    // Parameter gradients: sums of 150 terms of O(1) in another association (block partials
    // then blocks, against one row-order sum): up to ~150 roundings of 6e-8 each, and the sums
    // cancel (a dbias of 0.014 from O(1) terms), so 1e-5 of the terms' scale (floor 1).
    expect_close("fp32 dw, " + tag, f.dw, u.dw, 1e-5, 1.0);
    if (layernorm) expect_close("fp32 db, " + tag, f.db, u.db, 1e-5, 1.0);
    if (layernorm) expect_close("fp32 dbias, " + tag, f.dbias, u.dbias, 1e-5, 1.0);  // GPT-2: with the bias
    expect_same_arithmetic("bf16 dx, " + tag, fb.dx, ub.dx, true);
    expect_bf16_close("bf16 dw, " + tag, fb.dw, ub.dw);
  });
}

TEST(KernelsResidualNorms, BackwardBitwiseReproducibleAndFrozenSkip) {
  const Operands o = operands(4);
  for (bool layernorm : {true, false}) {
    const Out a = run_fused<float>(o, layernorm, layernorm, true), b = run_fused<float>(o, layernorm, layernorm, true);
    EXPECT_TRUE(bitwise_equal(a.dx, b.dx));
    EXPECT_TRUE(bitwise_equal(a.dw, b.dw));
    EXPECT_TRUE(bitwise_equal(a.db, b.db));
    EXPECT_TRUE(bitwise_equal(a.dbias, b.dbias));
    // Frozen parameters (null gradients, LoRA): dx unchanged, nothing else written.
    const Out frozen = run_fused<float>(o, layernorm, layernorm, false);
    EXPECT_TRUE(bitwise_equal(frozen.dx, a.dx));
    for (int c = 0; c < kC; ++c) EXPECT_EQ(frozen.dw[c], 0.0);
  }
}

// ---- the Warps form (the GPU form) on the host --------------------------------------------

TEST(KernelsResidualNorms, WarpsFormForwardAgainstReference) {
  check_layernorm_forward(k::NormForm::Warps, kN);  // double: packs of 2
  // 600 rows: 75 backward units of kWarpRowBlock rows, three chunks of the partials' sum.
  check_layernorm_forward(k::NormForm::Warps, 600);
  check_layernorm_forward(k::NormForm::Warps, kN, kC - 1);  // element by element
}

TEST(KernelsResidualNorms, WarpsFormBackwardFiniteDifferences) {
  for (int C : {kC, kC - 1}) {  // double rows in packs of 2, then element by element
    check_against_finite_differences(true, true, k::NormForm::Warps, C);
    check_against_finite_differences(true, false, k::NormForm::Warps, C);
    check_against_finite_differences(false, false, k::NormForm::Warps, C);
  }
}

TEST(KernelsResidualNorms, WarpsFormPacksWhereEveryRowAllows) {
  // Which kernels the fused and unfused norms launched (4 each): the 16-byte packs at
  // kPackedC (bf16 and fp32), element by element at kC; the Rows form never packs.
  struct Launched {
    int packed = 0, elementwise = 0, rows_fused_forward = 0;
  };
  const auto launched = [](auto tag, int C, k::NormForm form) {
    using T = decltype(tag);
    const Operands o = operands(7, 40, C);
    LaunchedKernels rec;
    run_fused<T>(o, true, true, true, 0.0, form);
    run_fused<T>(o, false, false, true, 0.0, form);
    run_unfused<T>(o, true, true, form);
    run_unfused<T>(o, false, false, form);
    return Launched{rec.count_ending("_warps16"), rec.count_ending("_warps"),
                    rec.count("Kernels::residual_layernorm_forward")};
  };
  for (const Launched l :
       {launched(bf16{}, kPackedC, k::NormForm::Warps), launched(float{}, kPackedC, k::NormForm::Warps)}) {
    EXPECT_EQ(l.packed, 8);
    EXPECT_EQ(l.elementwise, 0);
  }
  for (const Launched l : {launched(bf16{}, kC, k::NormForm::Warps), launched(float{}, kC, k::NormForm::Warps)}) {
    EXPECT_EQ(l.packed, 0);
    EXPECT_EQ(l.elementwise, 8);
  }
  const Launched rows = launched(bf16{}, kPackedC, k::NormForm::Rows);
  EXPECT_EQ(rows.packed + rows.elementwise, 0);
  EXPECT_EQ(rows.rows_fused_forward, 1);
}

TEST(KernelsResidualNorms, WarpsFormMatchesTheRowsForm) {
  // 600 rows: 75 warp units (3 chunks of the partials' two-pass sum) against 10 row blocks;
  // kPackedC columns: the Warps form in 16-byte packs (8 bf16, 4 fp32 per pack).
  for (int n : {kN, 600}) {
    for (int C : {kC, kPackedC}) {
      const Operands o = operands(5, n, C);
      for (bool layernorm : {true, false}) {
        const bool with_bias = layernorm;
        // Parameter gradients start from 0.5: the Warps form accumulates onto them too.
        const Out w = run_fused<float>(o, layernorm, with_bias, true, 0.5, k::NormForm::Warps);
        const Out r = run_fused<float>(o, layernorm, with_bias, true, 0.5, k::NormForm::Rows);
        // h: the same two roundings per element.
        EXPECT_TRUE(bitwise_equal(w.h, r.h)) << "fp32 h, layernorm " << layernorm << ", rows " << n << ", C " << C;
        // Row statistics, y and dx: the same formulas with the row sums in another order (index
        // order here, lane order in the Rows form's host loops): fp32 rounding of O(1) values.
        expect_close("fp32 statistics", w.stats, r.stats, 1e-5, 1.0);
        expect_close("fp32 y", w.y, r.y, 1e-5, 1.0);
        expect_close("fp32 dx", w.dx, r.dx, 1e-5, 1.0);
        // Column sums of up to 600 O(1) terms in another association (as in
        // BackwardMatchesTheUnfusedPath): 1e-5 of the terms' scale per 150 rows.
        const double tol = 1e-5 * n / kN;
        expect_close("fp32 dw", w.dw, r.dw, tol, 1.0);
        if (layernorm) expect_close("fp32 db", w.db, r.db, tol, 1.0);
        if (with_bias) expect_close("fp32 dbias", w.dbias, r.dbias, tol, 1.0);
        const Out wb = run_fused<bf16>(o, layernorm, with_bias, true, 0.5, k::NormForm::Warps);
        const Out rb = run_fused<bf16>(o, layernorm, with_bias, true, 0.5, k::NormForm::Rows);
        EXPECT_TRUE(bitwise_equal(wb.h, rb.h)) << "bf16 h";
        expect_bf16_close("bf16 y", wb.y, rb.y);
        expect_bf16_close("bf16 dx", wb.dx, rb.dx);
        expect_close("bf16 dw (fp32 sums of bf16 terms)", wb.dw, rb.dw, tol, 1.0);
      }
    }
  }
}

TEST(KernelsResidualNorms, WarpsFormBitwiseReproducibleAndFrozenSkip) {
  for (int C : {kC, kPackedC}) {
    const Operands o = operands(6, 600, C);
    for (bool layernorm : {true, false}) {
      const Out a = run_fused<float>(o, layernorm, layernorm, true, 0.0, k::NormForm::Warps);
      const Out b = run_fused<float>(o, layernorm, layernorm, true, 0.0, k::NormForm::Warps);
      EXPECT_TRUE(bitwise_equal(a.dx, b.dx));
      EXPECT_TRUE(bitwise_equal(a.dw, b.dw));
      EXPECT_TRUE(bitwise_equal(a.db, b.db));
      EXPECT_TRUE(bitwise_equal(a.dbias, b.dbias));
      const Out frozen = run_fused<float>(o, layernorm, layernorm, false, 0.0, k::NormForm::Warps);
      EXPECT_TRUE(bitwise_equal(frozen.dx, a.dx));
      for (int c = 0; c < C; ++c) EXPECT_EQ(frozen.dw[c], 0.0);
    }
  }
}
