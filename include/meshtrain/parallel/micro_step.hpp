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

#include "meshtrain/model/transformer.hpp"
#include "meshtrain/parallel/fsdp.hpp"

namespace meshtrain::parallel {

/// Forward + backward of one micro-batch; returns this rank's sum of token losses.
/// tokens/targets: device (N) int32. grad_scale: 1 / (tokens in the global batch).
template <class T>
double forward_backward(FsdpEngine<T>& engine, const model::Transformer<T>& model, model::ComputeContext ctx,
                        const std::int32_t* tokens, const std::int32_t* targets, model::BatchShape shape,
                        float grad_scale, bool activation_checkpointing);

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
