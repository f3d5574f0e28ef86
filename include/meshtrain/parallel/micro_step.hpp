#pragma once
/// \brief One micro-batch through the model under FSDP: the prefetch/overlap schedule.
///
/// forward:  gather(outer); for block i: gather(i) + prefetch(i+1..i+prefetch), compute,
///           reshard (full/hybrid); prefetch the last block for backward during the head
/// head:     final norm + LM head + cross-entropy forward and backward
/// backward: for block i (reverse): gather(i) + prefetch(i-1), compute grads, reshard,
///           async reduce-scatter / all-reduce (when due) while the next block computes
///
/// The MPI backend advances its non-blocking collectives through the progress hook that
/// the layers call between kernels.

#include <cstdint>
#include <functional>
#include <vector>

#include "model/transformer.hpp"
#include "parallel/fsdp.hpp"

namespace meshtrain::parallel {

/// Forward + backward of one micro-batch; returns this rank's sum of token losses, or, with
/// `loss_sum` (a device double), adds it there and returns 0 (nothing is read back: the
/// training step, train/step.hpp). tokens/targets: device (N) int32. grad_scale: 1 / (tokens
/// in the global batch); or 1, with `row_scale` (device, (N)) holding the scale of each row
/// (loss-masked data: 1 / the global batch's counted targets, filled on the device).
template <class T>
double forward_backward(FsdpEngine<T>& engine, const model::Transformer<T>& model, model::ComputeContext ctx,
                        const std::int32_t* tokens, const std::int32_t* targets, model::BatchShape shape,
                        float grad_scale, bool activation_checkpointing, double* loss_sum = nullptr,
                        const float* row_scale = nullptr);

/// Per-sequence sums of log p(target) over the counted targets of one micro-batch, (B) each:
/// the trained model's (policy) and the reference's (DPO).
struct SequenceLogps {
  std::vector<double> policy, reference;
};

/// DPO's and SimPO's gradient scale of a micro-batch's rows: from the sequences'
/// log-probabilities, policy and reference ((B) device doubles), the (N) device floats that
/// scale each row's cross-entropy gradient (train/step.cpp queues kernels::preference_pairs).
using PairScales = std::function<const float*(const double* policy, const double* reference)>;

/// \brief One micro-batch of DPO or SimPO: the policy's forward, keeping its activations as
/// forward_backward does; the reference's forward on the same gathered units, with the
/// LoRA adapters switched off and nothing kept -- unless `reference` ((B) device doubles: the
/// log-probabilities stored for a run without adapters, or SimPO's zeros) is given; the
/// policy's per-sequence log-probabilities; then the head's backward with each row's
/// cross-entropy gradient scaled by `scales`, and the blocks' backward. Everything stays on
/// the device (nothing is read back, so the step can be replayed from a CUDA graph). The
/// LM-head logits are computed twice for the policy (once for its log-probabilities, once in
/// the fused backward); no block is recomputed beyond what activation checkpointing does.
template <class T>
void dpo_forward_backward(FsdpEngine<T>& engine, const model::Transformer<T>& model, model::ComputeContext ctx,
                          const std::int32_t* tokens, const std::int32_t* targets, model::BatchShape shape,
                          bool activation_checkpointing, const double* reference, const PairScales& scales);

/// Forward only (DPO evaluation): the policy's and the reference's per-sequence
/// log-probabilities (the reference with the adapters off, or `reference` when given).
template <class T>
SequenceLogps forward_sequence_logps(FsdpEngine<T>& engine, const model::Transformer<T>& model,
                                     model::ComputeContext ctx, const std::int32_t* tokens,
                                     const std::int32_t* targets, model::BatchShape shape,
                                     const std::vector<double>* reference);

/// Forward only; returns this rank's sum of token losses (evaluation).
template <class T>
double forward_loss(FsdpEngine<T>& engine, const model::Transformer<T>& model, model::ComputeContext ctx,
                    const std::int32_t* tokens, const std::int32_t* targets, model::BatchShape shape);

/// Forward only; returns full-vocabulary logits on the host: (B, valid_vocab) for each
/// sequence's last position (generation) or (N, valid_vocab) for every position.
template <class T>
std::vector<float> forward_logits(FsdpEngine<T>& engine, const model::Transformer<T>& model,
                                  model::ComputeContext ctx, const std::int32_t* tokens, model::BatchShape shape,
                                  bool last_only);

/// Forward of s.T new tokens per sequence at positions kv.filled .. kv.filled+T-1 against
/// the KV cache (generation: the prompt once, then one token at a time). Appends their
/// keys/values (kv.filled += T) and returns the (B, valid_vocab) logits of each sequence's
/// last position on the host. Units are gathered and resharded as in forward_logits.
template <class T>
std::vector<float> forward_logits_cached(FsdpEngine<T>& engine, const model::Transformer<T>& model,
                                         model::ComputeContext ctx, const std::int32_t* tokens, model::BatchShape shape,
                                         model::KvCache<T>& kv);

}  // namespace meshtrain::parallel
