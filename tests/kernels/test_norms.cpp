// LayerNorm and RMSNorm: forward against a host reference, backward against finite
// differences (dx, dw, db all accumulate). Both forms (kernels::NormForm): Rows, the host
// form, and Warps, the GPU form, run here on the host against the same references.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_utils.hpp"
#include "kernels/norms.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

constexpr int kN = 13, kC = 70;  // 70 columns: a full 64-column block plus a tail
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
std::vector<double> norm_input(std::uint64_t seed) {
  auto x = random_normal(static_cast<std::size_t>(kN) * kC, seed);
  for (int i = 0; i < kN; ++i)
    for (int c = 0; c < kC; ++c) x[static_cast<std::size_t>(i) * kC + c] += 3.0 * (i % 3);
  return x;
}

void check_layernorm(k::NormForm form) {
  auto x = norm_input(1);
  auto w = random_normal(kC, 2);
  auto b = random_normal(kC, 3);
  const auto wy = random_normal(x.size(), 4);
  std::vector<double> mean, rstd;
  auto forward = [&]() {
    auto dx = upload<double>(x);
    auto dw = upload<double>(w);
    auto db = upload<double>(b);
    Buffer<double> y(x.size(), MemCategory::Workspace), m(kN, MemCategory::Workspace),
        r(kN, MemCategory::Workspace);
    k::layernorm_forward(dx.data(), dw.data(), db.data(), kEps, kN, kC, y.data(), m.data(), r.data(), form);
    mean = to_host(m);
    rstd = to_host(r);
    return download(y);
  };
  const auto y = forward();
  const auto ref = layernorm_ref(x, w, b, kN, kC);
  // 1e-12: the same two-pass formula in double; only summation order differs.
  expect_close("layernorm y", y, ref.y, 1e-12, 1e-6);
  expect_close("layernorm mean", mean, ref.mean, 1e-12, 1e-6);
  expect_close("layernorm rstd", rstd, ref.rstd, 1e-12, 1e-6);

  // Backward accumulates into nonzero dx, dw, db.
  const auto dx0 = random_normal(x.size(), 5), dw0 = random_normal(kC, 6), db0 = random_normal(kC, 7);
  auto ddy = upload<double>(wy);
  auto dx = upload<double>(x), dw = upload<double>(w);
  auto dm = to_device(mean), dr = to_device(rstd);
  auto gx = upload<double>(dx0), gw = upload<double>(dw0), gb = upload<double>(db0);
  k::layernorm_backward(ddy.data(), dx.data(), dw.data(), dm.data(), dr.data(), kN, kC, gx.data(),
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

void check_rmsnorm(k::NormForm form) {
  auto x = norm_input(11);
  auto w = random_normal(kC, 12);
  const auto wy = random_normal(x.size(), 13);
  std::vector<double> rstd;
  auto forward = [&]() {
    auto dx = upload<double>(x);
    auto dw = upload<double>(w);
    Buffer<double> y(x.size(), MemCategory::Workspace), r(kN, MemCategory::Workspace);
    k::rmsnorm_forward(dx.data(), dw.data(), kEps, kN, kC, y.data(), r.data(), form);
    rstd = to_host(r);
    return download(y);
  };
  const auto y = forward();
  const auto ref = rmsnorm_ref(x, w, kN, kC);
  // 1e-12: the same formula in double; only summation order differs.
  expect_close("rmsnorm y", y, ref.y, 1e-12, 1e-6);
  expect_close("rmsnorm rstd", rstd, ref.rstd, 1e-12, 1e-6);

  const auto dx0 = random_normal(x.size(), 14), dw0 = random_normal(kC, 15);
  auto ddy = upload<double>(wy);
  auto dx = upload<double>(x), dw = upload<double>(w);
  auto dr = to_device(rstd);
  auto gx = upload<double>(dx0), gw = upload<double>(dw0);
  k::rmsnorm_backward(ddy.data(), dx.data(), dw.data(), dr.data(), kN, kC, gx.data(), gw.data(), form);
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
TEST(KernelsNorms, WarpsFormLayerNormForwardBackward) { check_layernorm(k::NormForm::Warps); }
TEST(KernelsNorms, WarpsFormRmsNormForwardBackward) { check_rmsnorm(k::NormForm::Warps); }

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
