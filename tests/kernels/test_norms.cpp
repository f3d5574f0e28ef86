// LayerNorm and RMSNorm: forward against a host reference, backward against finite
// differences (dx, dw, db all accumulate). Both forms (kernels::NormForm): Rows, the host
// form, and Warps, the GPU form, run here on the host against the same references; the
// Warps form both in 16-byte packs and element by element (kernels::norm_rows_packable).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel_test_utils.hpp"
#include "kernels/norms.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

// 70 columns: a full 64-column block plus a tail; in double 35 packs of the Warps form's
// 16 bytes (69 columns: rows of 552 bytes, which that form moves element by element).
constexpr int kN = 13, kC = 70;
constexpr double kEps = 1e-5;

struct NormRef {
  std::vector<double> y, mean, rstd;
};

NormRef layernorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                      const std::vector<double>& b, int N, int C) {
  NormRef r{std::vector<double>(x.size()), std::vector<double>(N), std::vector<double>(N)};
  for (int i = 0; i < N; ++i) {
    const double* xr = &x[static_cast<std::size_t>(i) * C];
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += xr[c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
    v /= C;
    r.mean[i] = m;
    r.rstd[i] = 1.0 / std::sqrt(v + kEps);
    for (int c = 0; c < C; ++c) r.y[static_cast<std::size_t>(i) * C + c] = (xr[c] - m) * r.rstd[i] * w[c] + b[c];
  }
  return r;
}

NormRef rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w, int N, int C) {
  NormRef r{std::vector<double>(x.size()), {}, std::vector<double>(N)};
  for (int i = 0; i < N; ++i) {
    const double* xr = &x[static_cast<std::size_t>(i) * C];
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += xr[c] * xr[c];
    r.rstd[i] = 1.0 / std::sqrt(ms / C + kEps);
    for (int c = 0; c < C; ++c) r.y[static_cast<std::size_t>(i) * C + c] = xr[c] * r.rstd[i] * w[c];
  }
  return r;
}

/// Inputs with a large common offset per row: a one-pass variance would lose digits.
std::vector<double> norm_input(std::uint64_t seed, int C) {
  auto x = random_normal(static_cast<std::size_t>(kN) * C, seed);
  for (int i = 0; i < kN; ++i)
    for (int c = 0; c < C; ++c) x[static_cast<std::size_t>(i) * C + c] += 3.0 * (i % 3);
  return x;
}

void check_layernorm(k::NormForm form, int C = kC) {
  auto x = norm_input(1, C);
  auto w = random_normal(C, 2);
  auto b = random_normal(C, 3);
  const auto wy = random_normal(x.size(), 4);
  std::vector<double> mean, rstd;
  auto forward = [&]() {
    auto dx = upload<double>(x);
    auto dw = upload<double>(w);
    auto db = upload<double>(b);
    Buffer<double> y(x.size(), MemCategory::Workspace), m(kN, MemCategory::Workspace),
        r(kN, MemCategory::Workspace);
    k::layernorm_forward(dx.data(), dw.data(), db.data(), kEps, kN, C, y.data(), m.data(), r.data(), form);
    mean = to_host(m);
    rstd = to_host(r);
    return download(y);
  };
  const auto y = forward();
  const auto ref = layernorm_ref(x, w, b, kN, C);
  // 1e-12: the same two-pass formula in double; only summation order differs.
  expect_close("layernorm y", y, ref.y, 1e-12, 1e-6);
  expect_close("layernorm mean", mean, ref.mean, 1e-12, 1e-6);
  expect_close("layernorm rstd", rstd, ref.rstd, 1e-12, 1e-6);

  // Backward accumulates into nonzero dx, dw, db.
  const auto dx0 = random_normal(x.size(), 5), dw0 = random_normal(C, 6), db0 = random_normal(C, 7);
  auto ddy = upload<double>(wy);
  auto dx = upload<double>(x), dw = upload<double>(w);
  auto dm = to_device(mean), dr = to_device(rstd);
  auto gx = upload<double>(dx0), gw = upload<double>(dw0), gb = upload<double>(db0);
  k::layernorm_backward(ddy.data(), dx.data(), dw.data(), dm.data(), dr.data(), kN, C, gx.data(),
                        gw.data(), gb.data(), form);
  auto delta = [](std::vector<double> a, const std::vector<double>& a0) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] -= a0[i];
    return a;
  };
  const auto grad_x = delta(download(gx), dx0), grad_w = delta(download(gw), dw0),
             grad_b = delta(download(gb), db0);
  auto loss = [&]() { return weighted_sum(wy, forward()); };
  fd_check("layernorm dx", x, grad_x, loss, 60, 8);
  fd_check("layernorm dw", w, grad_w, loss, 40, 9);
  fd_check("layernorm db", b, grad_b, loss, 40, 10);
}

void check_rmsnorm(k::NormForm form, int C = kC) {
  auto x = norm_input(11, C);
  auto w = random_normal(C, 12);
  const auto wy = random_normal(x.size(), 13);
  std::vector<double> rstd;
  auto forward = [&]() {
    auto dx = upload<double>(x);
    auto dw = upload<double>(w);
    Buffer<double> y(x.size(), MemCategory::Workspace), r(kN, MemCategory::Workspace);
    k::rmsnorm_forward(dx.data(), dw.data(), kEps, kN, C, y.data(), r.data(), form);
    rstd = to_host(r);
    return download(y);
  };
  const auto y = forward();
  const auto ref = rmsnorm_ref(x, w, kN, C);
  // 1e-12: the same formula in double; only summation order differs.
  expect_close("rmsnorm y", y, ref.y, 1e-12, 1e-6);
  expect_close("rmsnorm rstd", rstd, ref.rstd, 1e-12, 1e-6);

  const auto dx0 = random_normal(x.size(), 14), dw0 = random_normal(C, 15);
  auto ddy = upload<double>(wy);
  auto dx = upload<double>(x), dw = upload<double>(w);
  auto dr = to_device(rstd);
  auto gx = upload<double>(dx0), gw = upload<double>(dw0);
  k::rmsnorm_backward(ddy.data(), dx.data(), dw.data(), dr.data(), kN, C, gx.data(), gw.data(), form);
  auto grad_x = download(gx), grad_w = download(gw);
  for (std::size_t i = 0; i < grad_x.size(); ++i) grad_x[i] -= dx0[i];
  for (std::size_t i = 0; i < grad_w.size(); ++i) grad_w[i] -= dw0[i];
  auto loss = [&]() { return weighted_sum(wy, forward()); };
  fd_check("rmsnorm dx", x, grad_x, loss, 60, 16);
  fd_check("rmsnorm dw", w, grad_w, loss, 40, 17);
}

}  // namespace

TEST(KernelsNorms, LayerNormForwardBackward) { check_layernorm(k::NormForm::Rows); }
TEST(KernelsNorms, RmsNormForwardBackward) { check_rmsnorm(k::NormForm::Rows); }
TEST(KernelsNorms, WarpsFormLayerNormForwardBackward) {
  ASSERT_TRUE(k::norm_rows_packable(kC, sizeof(double), {}));
  check_layernorm(k::NormForm::Warps);  // packs of 2 doubles
  ASSERT_FALSE(k::norm_rows_packable(kC - 1, sizeof(double), {}));
  check_layernorm(k::NormForm::Warps, kC - 1);  // element by element
}
TEST(KernelsNorms, WarpsFormRmsNormForwardBackward) {
  check_rmsnorm(k::NormForm::Warps);
  check_rmsnorm(k::NormForm::Warps, kC - 1);
}

TEST(KernelsNorms, RowsPackableOnlyWhenEveryRowStartsOn16Bytes) {
  alignas(16) static unsigned char bytes[64];
  const void* aligned = bytes;
  const void* odd = bytes + 2;
  EXPECT_EQ(k::kNormPackBytes, 16u);
  EXPECT_TRUE(k::norm_rows_packable(768, 2, {aligned, aligned}));  // GPT-2 bf16 rows: 1536 bytes
  EXPECT_TRUE(k::norm_rows_packable(576, 2, {aligned}));           // SmolLM2 bf16 rows: 1152 bytes
  EXPECT_TRUE(k::norm_rows_packable(8, 2, {aligned, nullptr}));    // null (no bias) is no tensor
  EXPECT_FALSE(k::norm_rows_packable(768, 2, {aligned, odd}));     // one base off the boundary
  EXPECT_FALSE(k::norm_rows_packable(70, 2, {aligned}));           // rows of 140 bytes: row 1 is off
  EXPECT_FALSE(k::norm_rows_packable(70, 4, {aligned}));           // 280 bytes
  EXPECT_TRUE(k::norm_rows_packable(70, 8, {aligned}));            // 560 bytes
  EXPECT_FALSE(k::norm_rows_packable(0, 4, {aligned}));
  EXPECT_FALSE(k::norm_rows_packable(-4, 4, {aligned}));
}

TEST(KernelsNorms, Bf16MatchesFloat) {
  const int N = 9, C = 200;
  const auto x = bf16_exact(random_normal(static_cast<std::size_t>(N) * C, 20));
  const auto w = bf16_exact(random_normal(C, 21));
  const auto b = bf16_exact(random_normal(C, 22));
  const auto dy = bf16_exact(random_normal(x.size(), 23));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    std::vector<std::vector<double>> outs;
    auto dx = upload<T>(x), dw = upload<T>(w), db = upload<T>(b), ddy = upload<T>(dy);
    Buffer<T> y(x.size(), MemCategory::Workspace);
    Buffer<float> m(N, MemCategory::Workspace), r(N, MemCategory::Workspace);
    k::layernorm_forward(dx.data(), dw.data(), db.data(), kEps, N, C, y.data(), m.data(), r.data());
    outs.push_back(download(y));
    auto gx = upload<T>(std::vector<double>(x.size(), 0.0));
    // Parameter gradients are acc_t<T>: fp32 for bf16.
    auto gw = upload<acc_t<T>>(std::vector<double>(C, 0.0)), gb = upload<acc_t<T>>(std::vector<double>(C, 0.0));
    k::layernorm_backward(ddy.data(), dx.data(), dw.data(), m.data(), r.data(), N, C, gx.data(), gw.data(),
                          gb.data());
    outs.push_back(download(gx));
    outs.push_back(download(gw));
    outs.push_back(download(gb));
    k::rmsnorm_forward(dx.data(), dw.data(), kEps, N, C, y.data(), r.data());
    outs.push_back(download(y));
    auto hx = upload<T>(std::vector<double>(x.size(), 0.0));
    auto hw = upload<acc_t<T>>(std::vector<double>(C, 0.0));
    k::rmsnorm_backward(ddy.data(), dx.data(), dw.data(), r.data(), N, C, hx.data(), hw.data());
    outs.push_back(download(hx));
    outs.push_back(download(hw));
    return outs;
  };
  const auto f = run(float{});
  const auto bb = run(bf16{});
  const char* names[] = {"layernorm y", "layernorm dx", "layernorm dw", "layernorm db",
                         "rmsnorm y",   "rmsnorm dx",   "rmsnorm dw"};
  for (std::size_t i = 0; i < f.size(); ++i) expect_bf16_close(names[i], bb[i], f[i]);
}

/// Forward and backward of both norms in `form`, fp32: y, then dx, dw, db (LayerNorm) and
/// dx, dw (RMSNorm, accumulated onto the same buffers).
std::vector<float> run_norms(k::NormForm form) {
  const int N = 1024, C = 300;
  const auto x = random_normal(static_cast<std::size_t>(N) * C, 30);
  const auto w = random_normal(C, 31), dy = random_normal(x.size(), 32);
  auto dx = upload<float>(x), dw = upload<float>(w), db = upload<float>(w), ddy = upload<float>(dy);
  Buffer<float> y(x.size(), MemCategory::Workspace), m(N, MemCategory::Workspace), r(N, MemCategory::Workspace),
      ry(x.size(), MemCategory::Workspace);
  k::layernorm_forward(dx.data(), dw.data(), db.data(), kEps, N, C, y.data(), m.data(), r.data(), form);
  auto gx = upload<float>(std::vector<double>(x.size(), 0.0));
  auto gw = upload<float>(std::vector<double>(C, 0.0)), gb = upload<float>(std::vector<double>(C, 0.0));
  k::layernorm_backward(ddy.data(), dx.data(), dw.data(), m.data(), r.data(), N, C, gx.data(), gw.data(), gb.data(),
                        form);
  k::rmsnorm_forward(dx.data(), dw.data(), kEps, N, C, ry.data(), r.data(), form);
  k::rmsnorm_backward(ddy.data(), dx.data(), dw.data(), r.data(), N, C, gx.data(), gw.data(), form);
  std::vector<float> all = to_host(y);
  for (const auto* buf : {&ry, &gx, &gw, &gb}) {
    const auto h = to_host(*buf);
    all.insert(all.end(), h.begin(), h.end());
  }
  return all;
}

TEST(KernelsNorms, Deterministic) {
  for (k::NormForm form : {k::NormForm::Rows, k::NormForm::Warps})
    EXPECT_TRUE(bitwise_equal(run_norms(form), run_norms(form))) << "form " << static_cast<int>(form);
}

TEST(KernelsNorms, WarpsFormMatchesTheRowsForm) {
  // The same formulas with each row's sums in another order (index order against the Rows
  // form's lane order on the host): fp32 rounding of O(1) values; the column sums of the
  // parameter gradients are the same code in both forms.
  const std::vector<float> wf = run_norms(k::NormForm::Warps), rf = run_norms(k::NormForm::Rows);
  ASSERT_EQ(wf.size(), rf.size());
  const std::size_t rows_part = wf.size() - 2 * 300;  // y, rmsnorm y, dx; then dw, db (300 each)
  const std::vector<double> w_rows(wf.begin(), wf.begin() + rows_part), r_rows(rf.begin(), rf.begin() + rows_part);
  const std::vector<double> w_cols(wf.begin() + rows_part, wf.end()), r_cols(rf.begin() + rows_part, rf.end());
  expect_close("Warps vs Rows (y, rmsnorm y, dx)", w_rows, r_rows, 1e-5, 1.0);
  // dw, db: 2048 terms of O(1) per column (typical sums ~30) built from row statistics that
  // differ in their last bits: 1e-4 of the sums' scale.
  expect_close("Warps vs Rows (dw, db)", w_cols, r_cols, 1e-4, 8.0);
}

namespace {

/// Both norms' forward and backward in type T and `form` on N x C: y, rmsnorm y, dx, then
/// dw, db (acc_t<T>), as doubles; with `off_boundary` every tensor starts one element past a
/// 16-byte boundary, so the Warps form cannot move its rows in packs.
template <class T>
std::vector<double> run_typed(k::NormForm form, int N, int C, bool off_boundary, bool row_packs = true) {
  using A = acc_t<T>;
  const int o = off_boundary ? 1 : 0;
  const auto x = random_normal(static_cast<std::size_t>(N) * C, 40);
  const auto w = random_normal(C, 41), b = random_normal(C, 42), dy = random_normal(x.size(), 43);
  const auto shifted = [o](std::vector<double> v) {
    v.insert(v.begin(), o, 0.0);
    return v;
  };
  auto X = upload<T>(shifted(x)), W = upload<T>(shifted(w)), B = upload<T>(shifted(b)), DY = upload<T>(shifted(dy));
  const std::vector<double> zeros(x.size(), 0.0);
  auto Y = upload<T>(shifted(zeros)), RY = upload<T>(shifted(zeros)), GX = upload<T>(shifted(zeros));
  Buffer<A> m(N, MemCategory::Workspace), r(N, MemCategory::Workspace);
  auto GW = upload<A>(std::vector<double>(C, 0.0)), GB = upload<A>(std::vector<double>(C, 0.0));
  k::layernorm_forward(X.data() + o, W.data() + o, B.data() + o, kEps, N, C, Y.data() + o, m.data(), r.data(), form,
                       row_packs);
  k::layernorm_backward(DY.data() + o, X.data() + o, W.data() + o, m.data(), r.data(), N, C, GX.data() + o, GW.data(),
                        GB.data(), form, row_packs);
  k::rmsnorm_forward(X.data() + o, W.data() + o, kEps, N, C, RY.data() + o, r.data(), form, row_packs);
  k::rmsnorm_backward(DY.data() + o, X.data() + o, W.data() + o, r.data(), N, C, GX.data() + o, GW.data(), form,
                      row_packs);
  std::vector<double> all;
  for (const auto* buf : {&Y, &RY, &GX}) {
    const auto h = download(*buf);
    all.insert(all.end(), h.begin() + o, h.end());
  }
  for (const auto* buf : {&GW, &GB}) {
    const auto h = download(*buf);
    all.insert(all.end(), h.begin(), h.end());
  }
  return all;
}

}  // namespace

TEST(KernelsNorms, WarpsFormInPacksAndElementwiseMatchesTheRowsForm) {
  // 200 columns: bf16 rows of 400 bytes (25 packs of 8), fp32 rows of 800 (50 packs of 4).
  const int N = 37, C = 200;
  const auto check = [&](auto tag, const char* type) {
    using T = decltype(tag);
    const std::vector<double> rows = run_typed<T>(k::NormForm::Rows, N, C, false);
    std::vector<double> packed, elementwise;
    {
      LaunchedKernels rec;
      packed = run_typed<T>(k::NormForm::Warps, N, C, false);
      for (const char* name : {"Kernels::layernorm_forward_warps16", "Kernels::layernorm_backward_warps16",
                               "Kernels::rmsnorm_forward_warps16", "Kernels::rmsnorm_backward_warps16"})
        EXPECT_EQ(rec.count(name), 1) << type << ": " << name;
    }
    {
      LaunchedKernels rec;
      elementwise = run_typed<T>(k::NormForm::Warps, N, C, true);
      EXPECT_EQ(rec.count_ending("_warps16"), 0) << type << ": rows off the 16-byte boundary moved in packs";
      EXPECT_EQ(rec.count("Kernels::layernorm_forward_warps"), 1) << type;
    }
    {
      // gpu.row_packs=false: the same aligned rows element by element, the same values as
      // the rows off the boundary (the same kernel on the same numbers).
      LaunchedKernels rec;
      const std::vector<double> unpacked = run_typed<T>(k::NormForm::Warps, N, C, false, false);
      EXPECT_EQ(rec.count_ending("_warps16"), 0) << type << ": gpu.row_packs=false moved rows in packs";
      EXPECT_EQ(rec.count_ending("_warps"), 4) << type;
      EXPECT_TRUE(bitwise_equal(unpacked, elementwise)) << type;
    }
    const std::size_t rows_part = rows.size() - 2 * static_cast<std::size_t>(C);
    const std::vector<double> r_rows(rows.begin(), rows.begin() + rows_part);
    const std::vector<double> r_cols(rows.begin() + rows_part, rows.end());
    for (const auto* v : {&packed, &elementwise}) {
      const std::string what = std::string(type) + (v == &packed ? " warps in packs" : " warps elementwise");
      ASSERT_EQ(v->size(), rows.size()) << what;
      const std::vector<double> w_rows(v->begin(), v->begin() + rows_part), w_cols(v->begin() + rows_part, v->end());
      if constexpr (std::is_same_v<T, bf16>) {
        // Outputs rounded to bf16 from row sums in another order: within one bf16 rounding.
        expect_bf16_close(what + " vs Rows (y, rmsnorm y, dx)", w_rows, r_rows);
        expect_bf16_close(what + " vs Rows (dw, db)", w_cols, r_cols);
      } else {
        expect_close(what + " vs Rows (y, rmsnorm y, dx)", w_rows, r_rows, 1e-5, 1.0);
        expect_close(what + " vs Rows (dw, db)", w_cols, r_cols, 1e-4, 1.0);
      }
    }
  };
  check(float{}, "fp32");
  check(bf16{}, "bf16");
}
