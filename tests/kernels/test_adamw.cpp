// Fused AdamW against PyTorch's torch.optim.AdamW update, written out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_utils.hpp"
#include "meshtrain/kernels/adamw.hpp"

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
