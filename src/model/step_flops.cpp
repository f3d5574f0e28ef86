#include "model/step_flops.hpp"

#include "model/param_spec.hpp"

namespace meshtrain::model {

namespace {

/// Forward FLOPs per token of the LoRA adapters: each adapter element takes part in one
/// multiply-add per token (x A^T, then u B^T), so 2 x the adapter parameter count.
double adapter_forward_flops(const ModelDims& d) {
  if (d.lora_rank <= 0) return 0;
  double n = 0;
  for (const ParamSpec& p : build_param_specs(d))
    if (p.is_lora) n += static_cast<double>(p.numel());
  return 2.0 * n;
}

}  // namespace

StepFlops train_step_flops(const ModelDims& d, int seq_len, bool checkpointing, double attention_fraction, bool dpo,
                           bool reference_forward) {
  const double base = d.flops_per_token_forward(0);  // 2 x matmul parameters (the LM head included)
  const double attention = attention_fraction * (d.flops_per_token_forward(seq_len) - base);
  // Backward recomputes the scores q k^T from the saved row statistics (the kernels keep
  // no (T, T) probabilities): 2 L T C per token, counted full as above.
  const double scores_again = attention_fraction * 2.0 * d.n_layers * static_cast<double>(seq_len) * d.d_model;
  const double adapters = adapter_forward_flops(d);
  const bool frozen_base = d.lora_rank > 0;
  const bool reference_pass = dpo && frozen_base && reference_forward;  // the adapters-off forward per step
  StepFlops f;
  f.forward = base + adapters + attention;
  // dX = dY W^T for every matmul (the gradient must reach the lowest adapter); dW = X^T dY
  // only where W trains; attention's dP, dQ, dK, dV are twice its forward.
  f.backward = base + (frozen_base ? 0.0 : base) + 2.0 * adapters + 2.0 * attention + scores_again;
  f.recompute = checkpointing ? f.forward : 0.0;
  f.scores_again = scores_again;
  if (dpo) {
    const double head = 2.0 * static_cast<double>(d.vocab) * d.d_model;  // the LM head's forward
    f.dpo_extra = head + (reference_pass ? base + attention : 0.0);
  }
  f.attention = 3.0 * attention + scores_again + (checkpointing ? attention : 0.0) +
                (reference_pass ? attention : 0.0);
  return f;
}

std::string describe_step_flops(const ModelDims& d, bool checkpointing, bool dpo, bool reference_forward) {
  std::string s = d.lora_rank > 0 ? "forward + input gradients + LoRA adapter gradients (frozen base: no weight gradients)"
                                  : "forward + input and weight gradients";
  if (checkpointing) s += " + recomputed forward (activation checkpointing)";
  if (dpo)
    s += d.lora_rank > 0 && reference_forward ? " + DPO's reference forward (adapters off) and first LM-head pass"
                                              : " + the pair loss's first LM-head pass";
  return s + " + attention scores recomputed in backward";
}

}  // namespace meshtrain::model
