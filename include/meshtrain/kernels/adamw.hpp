#pragma once
/// \brief Fused AdamW on fp32 master shards (decoupled weight decay, bias correction).

#include <cstddef>

namespace meshtrain::kernels {

struct AdamWParams {
  float lr = 0;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0;   ///< for this range (0 for norms/biases)
  float grad_scale = 1.0f;  ///< multiplies the gradient first (clipping coefficient)
  int step = 1;             ///< 1-based step for bias correction
};

/// For i < n: g = grad[i]*grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + weight_decay * p).
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                const AdamWParams& p);

}  // namespace meshtrain::kernels
