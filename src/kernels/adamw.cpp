#include "meshtrain/kernels/adamw.hpp"

#include <cmath>

#include "kernel_common.hpp"

namespace meshtrain::kernels {
using namespace detail;

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                const AdamWParams& p) {
  // Same operation order as torch.optim.AdamW (single-tensor path): scalars in double on
  // the host, then per element
  //   p *= 1 - lr*wd;  m += (1-b1) (g - m);  v = v b2 + (1-b2) g g;
  //   p -= step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps),  step_size = lr / (1 - b1^t).
  // (m: torch's lerp; equal to b1 m + (1-b1) g as the header states.)
  const double lr = p.lr, b1 = p.beta1, b2 = p.beta2;
  const double bc1 = 1.0 - std::pow(b1, p.step);
  const double bc2 = 1.0 - std::pow(b2, p.step);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - lr * static_cast<double>(p.weight_decay));
  const float w1 = static_cast<float>(1.0 - b1), w2 = static_cast<float>(1.0 - b2);
  const float beta2 = p.beta2, eps = p.eps, gs = p.grad_scale;
  Kokkos::parallel_for(
      "Kernels::adamw_step", Range64(0, static_cast<std::int64_t>(n)),
      KOKKOS_LAMBDA(std::int64_t i) {
        const float g = grad[i] * gs;
        const float m = exp_avg[i] + w1 * (g - exp_avg[i]);
        const float v = exp_avg_sq[i] * beta2 + w2 * g * g;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        const float denom = math::sqrt(v) / bc2_sqrt + eps;
        param[i] = param[i] * decay - step_size * (m / denom);
      });
}

}  // namespace meshtrain::kernels
