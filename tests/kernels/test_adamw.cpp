// Fused AdamW against PyTorch's torch.optim.AdamW update, written out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_utils.hpp"
#include "kernels/adamw.hpp"
#include "kernels/elementwise.hpp"

using namespace meshtrain;
using namespace meshtrain::test;
namespace k = meshtrain::kernels;

namespace {

/// torch.optim.AdamW, single-tensor path (amsgrad=False, maximize=False), in double:
///   param.mul_(1 - lr * weight_decay)
///   exp_avg.lerp_(grad, 1 - beta1)
///   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
///   step_size = lr / (1 - beta1 ** step)
///   denom = (exp_avg_sq.sqrt() / sqrt(1 - beta2 ** step)).add_(eps)
///   param.addcdiv_(exp_avg, denom, value=-step_size)
/// with grad already multiplied by the clipping coefficient (grad_scale).
void adamw_ref(std::vector<double>& p, const std::vector<double>& grad, std::vector<double>& m,
               std::vector<double>& v, const k::AdamWParams& hp) {
  const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps, wd = hp.weight_decay;
  const double step_size = lr / (1 - std::pow(b1, hp.step));
  const double bc2_sqrt = std::sqrt(1 - std::pow(b2, hp.step));
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double g = grad[i] * hp.grad_scale;
    p[i] *= 1 - lr * wd;
    m[i] += (1 - b1) * (g - m[i]);
    v[i] = v[i] * b2 + (1 - b2) * g * g;
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }
}

}  // namespace

TEST(KernelsAdamW, MatchesPyTorchFormulaOverSteps) {
  const std::size_t n = 1037;
  // fp32-exact start so that the reference and the kernel begin from the same values.
  auto p_ref = to_double(convert<float>(random_normal(n, 1)));
  std::vector<double> m_ref(n, 0.0), v_ref(n, 0.0);
  auto dp = upload<float>(p_ref);
  auto dm = upload<float>(m_ref), dv = upload<float>(v_ref);
  k::AdamWParams hp;
  hp.lr = 3e-3f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  hp.eps = 1e-8f;
  hp.weight_decay = 0.1f;
  for (int step = 1; step <= 6; ++step) {
    hp.step = step;
    hp.grad_scale = step % 2 ? 1.0f : 0.37f;  // clipping on some steps
    auto g = to_double(convert<float>(random_normal(n, 100 + step, 0.5)));
    if (step == 3)  // tiny gradients: eps matters
      for (std::size_t i = 0; i < n; i += 7) g[i] = 1e-9;
    auto dg = upload<float>(g);
    k::adamw_step(dp.data(), dg.data(), dm.data(), dv.data(), n, hp);
    adamw_ref(p_ref, g, m_ref, v_ref, hp);
    // fp32 arithmetic vs the double reference: a handful of roundings per step, compounding
    // over 6 steps, stays below 1e-5 relative. Floors: exp_avg is a running mean of
    // gradients of either sign (|g| ~ 0.5), so near-zero entries carry the absolute fp32
    // rounding of their O(0.5) terms (~3e-8 per step): floor 1e-2 (absolute 1e-7);
    // exp_avg_sq is a sum of positive terms (no cancellation) and param is O(1).
    // A wrong bias correction or decay term is off by >1e-3 relative.
    expect_close("param step " + std::to_string(step), download(dp), p_ref, 1e-5, 1e-6);
    expect_close("exp_avg step " + std::to_string(step), download(dm), m_ref, 1e-5, 1e-2);
    expect_close("exp_avg_sq step " + std::to_string(step), download(dv), v_ref, 1e-5, 1e-12);
  }
}

TEST(KernelsAdamW, NoDecayNoUpdateWhenLrZero) {
  const std::size_t n = 100;
  const auto p0 = to_double(convert<float>(random_normal(n, 2)));
  auto dp = upload<float>(p0);
  auto dg = upload<float>(random_normal(n, 3));
  auto dm = upload<float>(std::vector<double>(n, 0.0)), dv = upload<float>(std::vector<double>(n, 0.0));
  k::AdamWParams hp;
  hp.lr = 0.0f;
  hp.weight_decay = 0.1f;
  k::adamw_step(dp.data(), dg.data(), dm.data(), dv.data(), n, hp);
  EXPECT_TRUE(bitwise_equal(download(dp), p0));  // exact: p * 1 - 0 * (...)
}

namespace {

/// Segments of a 700-element flat buffer with gaps (padding, frozen pieces) between them and
/// mixed decay; `first` filled in as the kernels expect.
std::vector<k::FlatSegment> test_segments() {
  std::vector<k::FlatSegment> s = {{3, 120, 0, 1}, {130, 1, 0, 0}, {131, 257, 0, 1}, {400, 64, 0, 0},
                                   {480, 200, 0, 1}, {690, 7, 0, 0}};
  std::int64_t first = 0;
  for (auto& x : s) {
    x.first = first;
    first += x.numel;
  }
  return s;
}
constexpr std::size_t kFlat = 700;

std::int64_t total_of(const std::vector<k::FlatSegment>& s) { return s.back().first + s.back().numel; }

}  // namespace

// Multi-tensor AdamW (the GPU's one launch per unit, run here on host threads, and the host's
// per-segment launches) is element for element adamw_step: bitwise equal to one adamw_step per
// segment with its weight decay, the clip coefficient read from the device scalar; elements
// outside the segments untouched; the compute copy is the updated parameter rounded to bf16;
// and within fp32 rounding of the double-precision PyTorch formula.
TEST(KernelsAdamW, MultiTensorEqualsPerSegmentSteps) {
  const auto segs = test_segments();
  auto dsegs = to_device(segs);
  const auto p0 = to_double(convert<float>(random_normal(kFlat, 50)));
  const auto m0 = to_double(convert<float>(random_normal(kFlat, 51, 0.1)));
  const auto v0 = to_double(convert<float>(std::vector<double>(kFlat, 0.02)));
  const auto g = to_double(convert<float>(random_normal(kFlat, 52, 0.5)));
  k::AdamWParams hp;
  hp.lr = 2e-3f;
  hp.weight_decay = 0.1f;
  hp.step = 3;
  const double clip = 0.37;  // the coefficient grad_norm_clip would have written
  auto dnorm = to_device(std::vector<double>{2.7, clip});

  // Unfused: one adamw_step per segment, grad_scale = float(clip) as adamw_update passes it.
  auto up = upload<float>(p0), um = upload<float>(m0), uv = upload<float>(v0), ug = upload<float>(g);
  for (const auto& s : segs) {
    k::AdamWParams h = hp;
    h.weight_decay = s.decay ? hp.weight_decay : 0.0f;
    h.grad_scale = static_cast<float>(clip);
    k::adamw_step(up.data() + s.offset, ug.data() + s.offset, um.data() + s.offset, uv.data() + s.offset,
                  static_cast<std::size_t>(s.numel), h);
  }
  for (const auto launch : {k::SegmentLaunch::Single, k::SegmentLaunch::PerSegment, k::SegmentLaunch::Auto}) {
    auto fp = upload<float>(p0), fm = upload<float>(m0), fv = upload<float>(v0), fg = upload<float>(g);
    auto fc = upload<bf16>(std::vector<double>(kFlat, 5.0));
    k::adamw_multi(fp.data(), fg.data(), fm.data(), fv.data(), dsegs.data(), static_cast<int>(segs.size()),
                   total_of(segs), hp, dnorm.data(), fc.data(), launch);
    EXPECT_TRUE(bitwise_equal(download(fp), download(up))) << "param, launch " << static_cast<int>(launch);
    EXPECT_TRUE(bitwise_equal(download(fm), download(um))) << "exp_avg";
    EXPECT_TRUE(bitwise_equal(download(fv), download(uv))) << "exp_avg_sq";
    const auto p = to_host(fp);
    const auto c = to_host(fc);
    std::vector<char> inside(kFlat, 0);
    for (const auto& s : segs)
      for (std::int64_t i = s.offset; i < s.offset + s.numel; ++i) inside[static_cast<std::size_t>(i)] = 1;
    for (std::size_t i = 0; i < kFlat; ++i) {
      if (inside[i]) {
        EXPECT_EQ(static_cast<float>(c[i]), static_cast<float>(bf16(p[i]))) << i;
      } else {
        EXPECT_EQ(static_cast<double>(p[i]), p0[i]) << "outside the segments: " << i;
        EXPECT_EQ(static_cast<float>(c[i]), 5.0f) << i;
      }
    }
  }
  // Against the double-precision formula, segment by segment.
  std::vector<double> pr = p0, mr = m0, vr = v0;
  for (const auto& s : segs) {
    const auto a = static_cast<std::size_t>(s.offset), n = static_cast<std::size_t>(s.numel);
    std::vector<double> ps(pr.begin() + a, pr.begin() + a + n), ms(mr.begin() + a, mr.begin() + a + n),
        vs(vr.begin() + a, vr.begin() + a + n), gs(g.begin() + a, g.begin() + a + n);
    k::AdamWParams h = hp;
    h.weight_decay = s.decay ? hp.weight_decay : 0.0f;
    h.grad_scale = static_cast<float>(clip);
    adamw_ref(ps, gs, ms, vs, h);
    std::copy(ps.begin(), ps.end(), pr.begin() + a);
    std::copy(ms.begin(), ms.end(), mr.begin() + a);
    std::copy(vs.begin(), vs.end(), vr.begin() + a);
  }
  expect_close("multi-tensor param", download(up), pr, 1e-5, 1e-6);
  expect_close("multi-tensor exp_avg_sq", download(uv), vr, 1e-5, 1e-12);
}

// A non-finite global norm (NaN or inf) leaves parameters, moments and the compute copy as
// they were: the device skips the step without the host reading the norm first.
TEST(KernelsAdamW, MultiTensorSkipsOnNonFiniteNorm) {
  const auto segs = test_segments();
  auto dsegs = to_device(segs);
  const auto p0 = to_double(convert<float>(random_normal(kFlat, 60)));
  const auto g = random_normal(kFlat, 61);
  k::AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  for (const double bad : {std::nan(""), HUGE_VAL}) {
    for (const auto launch : {k::SegmentLaunch::Single, k::SegmentLaunch::PerSegment}) {
      auto dnorm = to_device(std::vector<double>{bad, 1.0});
      auto fp = upload<float>(p0), fg = upload<float>(g);
      auto fm = upload<float>(std::vector<double>(kFlat, 0.25)), fv = upload<float>(std::vector<double>(kFlat, 0.5));
      auto fc = upload<bf16>(std::vector<double>(kFlat, 3.0));
      k::adamw_multi(fp.data(), fg.data(), fm.data(), fv.data(), dsegs.data(), static_cast<int>(segs.size()),
                     total_of(segs), hp, dnorm.data(), fc.data(), launch);
      EXPECT_TRUE(bitwise_equal(download(fp), p0));
      EXPECT_TRUE(bitwise_equal(download(fm), std::vector<double>(kFlat, 0.25)));
      EXPECT_TRUE(bitwise_equal(download(fv), std::vector<double>(kFlat, 0.5)));
      EXPECT_TRUE(bitwise_equal(download(fc), std::vector<double>(kFlat, 3.0)));
    }
  }
}

// The norm's pieces: one reduction over all segments (GPU form) and the per-segment running
// sum (host form, bitwise the additions of per-parameter sum_squares calls) against a double
// sum; then the square root and clip coefficient against the host formula of the unfused
// step (std::min(1.0, max / (norm + 1e-6))), bitwise, including no clipping and a NaN norm.
TEST(KernelsAdamW, SegmentSumOfSquaresAndClip) {
  const auto segs = test_segments();
  auto dsegs = to_device(segs);
  const auto x = to_double(convert<float>(random_normal(kFlat, 70, 3.0)));
  auto dx = upload<float>(x);
  double ref = 0;
  for (const auto& s : segs)
    for (std::int64_t i = s.offset; i < s.offset + s.numel; ++i) ref += x[static_cast<std::size_t>(i)] * x[static_cast<std::size_t>(i)];
  auto out = to_device(std::vector<double>{123.0});  // Single overwrites
  k::sum_squares_segments(dx.data(), dsegs.data(), static_cast<int>(segs.size()), total_of(segs), out.data(),
                          k::SegmentLaunch::Single);
  EXPECT_NEAR(to_host(out)[0], ref, 1e-12 * ref);
  auto acc = to_device(std::vector<double>{0.5});  // PerSegment adds
  k::sum_squares_segments(dx.data(), dsegs.data(), static_cast<int>(segs.size()), total_of(segs), acc.data(),
                          k::SegmentLaunch::PerSegment);
  double running = 0.5;
  for (const auto& s : segs) running += k::sum_squares(dx.data() + s.offset, static_cast<std::size_t>(s.numel));
  EXPECT_EQ(to_host(acc)[0], running);
  // Partials in index order.
  auto parts = to_device(std::vector<double>{1e-3, 7.25, 1e5, 0.0, 3.5});
  auto sum = to_device(std::vector<double>{0.0});
  k::sum_in_order(parts.data(), 5, sum.data());
  EXPECT_EQ(to_host(sum)[0], (((0.0 + 1e-3) + 7.25) + 1e5 + 0.0) + 3.5);
  for (const double sq : {0.0, 0.25, 4.0, 1e6, std::nan("")}) {
    for (const double max_norm : {0.0, 1.0, 1e9}) {
      auto nc = to_device(std::vector<double>{sq, -1.0});
      k::grad_norm_clip(nc.data(), max_norm);
      const auto h = to_host(nc);
      const double norm = std::sqrt(sq);
      const double clip = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
      if (std::isnan(sq)) {
        EXPECT_TRUE(std::isnan(h[0]));
      } else {
        EXPECT_EQ(h[0], norm);
      }
      EXPECT_EQ(h[1], clip) << "sum of squares " << sq << ", max_norm " << max_norm;
    }
  }
}
