#pragma once
/// \brief The FLOPs one training step performs per token, as the kernels issue them: what
/// the trainer's MFU and the planner's predicted GEMM time count (issue 32: a frozen LoRA
/// base computes no weight gradients, so crediting it with 3x the forward overstated MFU).

#include <string>

#include "model/model_dims.hpp"

namespace meshtrain::model {

/// Per token of the global batch, over the whole model (divide by tp for one rank's share).
/// Attention is counted full (q k^T and p v over all keys, not causal-halved), like
/// ModelDims::flops_per_token_forward; `attention_fraction` < 1 is the share of it that
/// document-masked packed rows compute (plan::document_attention_fraction).
struct StepFlops {
  double forward = 0;    ///< base matmuls, LoRA adapters, attention
  double backward = 0;   ///< input gradients of every matmul, weight gradients of the trainable ones
                         ///< (the adapters only under LoRA), attention backward with its recomputed scores
  double recompute = 0;  ///< activation checkpointing: each block's forward again inside backward
  double scores_again = 0;  ///< of `backward`: the attention scores it recomputes
  /// train.objective = dpo, simpo: the LM head's first pass (per-row log-probabilities before
  /// the scaled backward) and, DPO under LoRA, the reference forward with the adapters off
  /// (without LoRA the reference log-probabilities are computed once before training, not per
  /// step; SimPO has no reference).
  double dpo_extra = 0;
  /// Of all the above: attention's share (scores and weighted sum forward, dP/dQ/dK/dV and
  /// the recomputed scores backward, again in `recompute` and DPO's reference forward). The
  /// cost model times it at the attention kernel's own rate where that is a fused kernel.
  double attention = 0;
  double total() const { return forward + backward + recompute + dpo_extra; }
};

/// `checkpointing`: train.activation_checkpointing. The base is frozen exactly when
/// dims.lora_rank > 0 (LoRA fine-tuning freezes every base parameter). `dpo`: a preference
/// objective (dpo or simpo); `reference_forward` false: one without a reference (simpo).
StepFlops train_step_flops(const ModelDims& dims, int seq_len, bool checkpointing, double attention_fraction = 1.0,
                           bool dpo = false, bool reference_forward = true);

/// What train_step_flops counts, for the log: e.g. "forward + input gradients + LoRA adapter
/// gradients (frozen base: no weight gradients) + recomputed forward (activation
/// checkpointing) + attention scores recomputed in backward".
std::string describe_step_flops(const ModelDims& dims, bool checkpointing, bool dpo = false,
                                bool reference_forward = true);

}  // namespace meshtrain::model
