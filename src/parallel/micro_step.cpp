#include "parallel/micro_step.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/trace.hpp"

namespace meshtrain::parallel {

using model::BatchShape;
using model::BlockCache;

namespace {

/// A micro-batch's activations kept for the backward: the residual stream at every block
/// boundary, (N, C) each, and each block's cache (empty under activation checkpointing).
template <class T>
struct KeptActivations {
  std::vector<Buffer<T>> x;
  std::vector<BlockCache<T>> cache;
};

/// Embedding and every block forward, keeping the activations; `also(u, params)` runs on
/// each unit's gathered parameters after its own forward, before the unit is resharded
/// (DPO's reference forward rides on the same gathers). Ends with the last block's gather
/// prefetched for the backward.
template <class T, class Also>
KeptActivations<T> forward_keeping(FsdpEngine<T>& eng, const model::Transformer<T>& model,
                                   const model::ComputeContext& ctx, const std::int32_t* tokens, BatchShape s,
                                   bool checkpointing, Also&& also) {
  const int L = model.dims().n_layers;
  const int prefetch = eng.options().prefetch;
  const std::size_t NC = static_cast<std::size_t>(s.N()) * model.dims().d_model;
  KeptActivations<T> a{std::vector<Buffer<T>>(L + 1), std::vector<BlockCache<T>>(L)};

  eng.gather(0);
  for (int k = 1; k <= prefetch; ++k) eng.gather(k, true);
  a.x[0] = Buffer<T>(NC, MemCategory::Activations);
  {
    TraceRange trace("meshtrain::embedding_forward");
    model.embed_forward(ctx, eng.wait_outer(), tokens, s, a.x[0].data());
    also(0, nullptr, a.x[0]);  // the outer unit's parameters are the head's, read there
  }
  for (int i = 0; i < L; ++i) {
    TraceRange trace("meshtrain::forward", i);
    const int u = 1 + i;
    eng.gather(u);
    for (int k = 1; k <= prefetch; ++k) eng.gather(u + k, true);
    const T* p = eng.wait_params(u);
    a.x[i + 1] = Buffer<T>(NC, MemCategory::Activations);
    model.block_forward(ctx, i, p, s, a.x[i].data(), a.x[i + 1].data(), a.cache[i], checkpointing);
    also(u, p, a.x[i + 1]);
    eng.after_forward(u);
    eng.progress();
  }
  if (L > 0 && prefetch > 0) eng.gather(L, true);  // first block of backward, during the head
  return a;
}

/// The blocks' and the embedding's backward from dx = dLoss/dx_L (N, C), after the head.
template <class T>
void backward_from_head(FsdpEngine<T>& eng, const model::Transformer<T>& model, const model::ComputeContext& ctx,
                        const std::int32_t* tokens, BatchShape s, KeptActivations<T>& a, Buffer<T>& dx) {
  const int L = model.dims().n_layers;
  const int prefetch = eng.options().prefetch;
  a.x[L].reset();
  for (int i = L - 1; i >= 0; --i) {
    TraceRange trace("meshtrain::backward", i);
    const int u = 1 + i;
    eng.gather(u);
    for (int k = 1; k <= prefetch && u - k >= 1; ++k) eng.gather(u - k, true);
    const T* p = eng.wait_params(u);
    model.block_backward(ctx, i, p, eng.grad_buffer(u), s, a.x[i].data(), a.cache[i], dx.data());
    eng.after_backward(u);
    if (i > 0) a.x[i].reset();
    eng.progress();
  }
  TraceRange trace("meshtrain::embedding_backward");
  model.embed_backward(ctx, eng.grad_buffer(0), tokens, s, dx.data());
  eng.after_backward(0);
  eng.progress();
}

}  // namespace

template <class T>
double forward_backward(FsdpEngine<T>& eng, const model::Transformer<T>& model, model::ComputeContext ctx,
                        const std::int32_t* tokens, const std::int32_t* targets, BatchShape s, float grad_scale,
                        bool checkpointing, double* loss_sum, const float* row_scale) {
  ctx.progress = [&eng] { eng.progress(); };
  const int L = model.dims().n_layers;
  const std::size_t NC = static_cast<std::size_t>(s.N()) * model.dims().d_model;
  KeptActivations<T> a = forward_keeping(eng, model, ctx, tokens, s, checkpointing, [](int, const T*, const Buffer<T>&) {});
  Buffer<T> dx(NC, MemCategory::Activations);
  double loss = 0;
  {
    TraceRange trace("meshtrain::head");
    loss = model.head_forward_backward(ctx, eng.wait_outer(), eng.grad_buffer(0), s, a.x[L].data(), targets,
                                       grad_scale, dx.data(), row_scale, loss_sum);
  }
  eng.after_forward(0);
  backward_from_head(eng, model, ctx, tokens, s, a, dx);
  return loss;
}

template <class T>
void dpo_forward_backward(FsdpEngine<T>& eng, const model::Transformer<T>& model, model::ComputeContext ctx,
                          const std::int32_t* tokens, const std::int32_t* targets, BatchShape s, bool checkpointing,
                          const double* reference, const PairScales& scales) {
  ctx.progress = [&eng] { eng.progress(); };
  const int L = model.dims().n_layers;
  const std::size_t NC = static_cast<std::size_t>(s.N()) * model.dims().d_model;
  model::ComputeContext ref_ctx = ctx;
  ref_ctx.adapters_off = true;
  // The reference's residual stream (N, C), one block at a time on the policy's gathered
  // units: the embedding has no adapter, so it starts as the policy's x_0.
  Buffer<T> xr, yr;
  const bool own_reference = reference == nullptr;
  KeptActivations<T> a = forward_keeping(eng, model, ctx, tokens, s, checkpointing,
                                         [&](int u, const T* p, const Buffer<T>& x_policy) {
                                           if (!own_reference) return;
                                           if (u == 0) {
                                             xr = Buffer<T>(NC, MemCategory::Activations);
                                             yr = Buffer<T>(NC, MemCategory::Activations);
                                             Kokkos::deep_copy(ExecSpace(), xr.view(), x_policy.view());
                                             return;
                                           }
                                           BlockCache<T> unused;  // forward only
                                           model.block_forward(ref_ctx, u - 1, p, s, xr.data(), yr.data(), unused,
                                                               /*checkpoint=*/true);
                                           std::swap(xr, yr);
                                         });
  const model::OuterParams<T> outer = eng.wait_outer();
  // (B) each: the policy's and the reference's log-probabilities.
  Buffer<double> logps(static_cast<std::size_t>(own_reference ? 2 : 1) * s.B, MemCategory::Workspace);
  if (own_reference) {
    model.head_sequence_logp(ref_ctx, outer, s, xr.data(), targets, logps.data() + s.B);
    reference = logps.data() + s.B;
  }
  xr.reset();
  yr.reset();
  // The policy's log-probabilities need the whole sequence before any gradient can be
  // scaled, so the head runs twice: this forward, then the fused forward + backward below
  // with each row's coefficient (the LM-head GEMM of the forward is computed again; the
  // blocks are not).
  model.head_sequence_logp(ctx, outer, s, a.x[L].data(), targets, logps.data());
  const float* row_scale = scales(logps.data(), reference);  // (N)
  Buffer<T> dx(NC, MemCategory::Activations);
  // The head's cross-entropy sum is not DPO's loss, but given a device scalar to add it to,
  // the head reads nothing back (without one it returns the sum, a read inside the step).
  Buffer<double> unused_loss(1, MemCategory::Workspace);
  model.head_forward_backward(ctx, outer, eng.grad_buffer(0), s, a.x[L].data(), targets, 1.0f, dx.data(), row_scale,
                              unused_loss.data());
  eng.after_forward(0);
  backward_from_head(eng, model, ctx, tokens, s, a, dx);
}

/// Embedding and every block, forward only. With `kv`, the tokens are the positions after
/// the kv.filled cached ones and each block attends to (and extends) the cache.
template <class T>
static Buffer<T> forward_to_last(FsdpEngine<T>& eng, const model::Transformer<T>& model,
                                 const model::ComputeContext& ctx, const std::int32_t* tokens, BatchShape s,
                                 model::KvCache<T>* kv = nullptr) {
  const int L = model.dims().n_layers;
  const std::size_t NC = static_cast<std::size_t>(s.N()) * model.dims().d_model;
  Buffer<T> x(NC, MemCategory::Activations), y(NC, MemCategory::Activations);
  eng.gather(0);
  model.embed_forward(ctx, eng.wait_outer(), tokens, s, x.data(), kv ? kv->filled : 0);
  for (int i = 0; i < L; ++i) {
    const int u = 1 + i;
    eng.gather(u);
    for (int k = 1; k <= eng.options().prefetch; ++k) eng.gather(u + k, true);
    if (kv) {
      model.block_forward_cached(ctx, i, eng.wait_params(u), s, x.data(), y.data(), *kv);
    } else {
      BlockCache<T> cache;
      model.block_forward(ctx, i, eng.wait_params(u), s, x.data(), y.data(), cache, /*checkpoint=*/true);
    }
    eng.after_forward(u);
    std::swap(x, y);
  }
  if (kv) kv->filled += s.T;
  return x;
}

template <class T>
double forward_loss(FsdpEngine<T>& eng, const model::Transformer<T>& model, model::ComputeContext ctx,
                    const std::int32_t* tokens, const std::int32_t* targets, BatchShape s) {
  ctx.progress = [&eng] { eng.progress(); };
  Buffer<T> x = forward_to_last(eng, model, ctx, tokens, s);
  const double loss = model.head_loss(ctx, eng.wait_outer(), s, x.data(), targets);
  eng.release_all();
  return loss;
}

template <class T>
SequenceLogps forward_sequence_logps(FsdpEngine<T>& eng, const model::Transformer<T>& model, model::ComputeContext ctx,
                                     const std::int32_t* tokens, const std::int32_t* targets, BatchShape s,
                                     const std::vector<double>* reference) {
  ctx.progress = [&eng] { eng.progress(); };
  SequenceLogps lp;
  if (reference) {
    lp.reference = *reference;
  } else {
    // Evaluation only: the reference pass gathers every unit a second time (training
    // shares the gathers instead, dpo_forward_backward).
    model::ComputeContext ref_ctx = ctx;
    ref_ctx.adapters_off = true;
    Buffer<T> x = forward_to_last(eng, model, ref_ctx, tokens, s);
    lp.reference = model.head_sequence_logp(ref_ctx, eng.wait_outer(), s, x.data(), targets);
  }
  Buffer<T> x = forward_to_last(eng, model, ctx, tokens, s);
  lp.policy = model.head_sequence_logp(ctx, eng.wait_outer(), s, x.data(), targets);
  eng.release_all();
  return lp;
}

template <class T>
std::vector<float> forward_logits(FsdpEngine<T>& eng, const model::Transformer<T>& model, model::ComputeContext ctx,
                                  const std::int32_t* tokens, BatchShape s, bool last_only) {
  ctx.progress = [&eng] { eng.progress(); };
  Buffer<T> x = forward_to_last(eng, model, ctx, tokens, s);
  std::vector<float> logits = model.logits(ctx, eng.wait_outer(), s, x.data(), last_only);
  eng.release_all();
  return logits;
}

template <class T>
std::vector<float> forward_logits_cached(FsdpEngine<T>& eng, const model::Transformer<T>& model,
                                         model::ComputeContext ctx, const std::int32_t* tokens, BatchShape s,
                                         model::KvCache<T>& kv) {
  ctx.progress = [&eng] { eng.progress(); };
  Buffer<T> x = forward_to_last(eng, model, ctx, tokens, s, &kv);
  std::vector<float> logits = model.logits(ctx, eng.wait_outer(), s, x.data(), /*last_only=*/true);
  eng.release_all();
  return logits;
}

#define MESHTRAIN_INSTANTIATE(T)                                                                                 \
  template double forward_backward<T>(FsdpEngine<T>&, const model::Transformer<T>&, model::ComputeContext,       \
                                      const std::int32_t*, const std::int32_t*, BatchShape, float, bool,         \
                                      double*, const float*);                                                    \
  template void dpo_forward_backward<T>(FsdpEngine<T>&, const model::Transformer<T>&, model::ComputeContext,      \
                                        const std::int32_t*, const std::int32_t*, BatchShape, bool, const double*,  \
                                        const PairScales&);                                                         \
  template SequenceLogps forward_sequence_logps<T>(FsdpEngine<T>&, const model::Transformer<T>&,                 \
                                                   model::ComputeContext, const std::int32_t*, const std::int32_t*, \
                                                   BatchShape, const std::vector<double>*);                       \
  template double forward_loss<T>(FsdpEngine<T>&, const model::Transformer<T>&, model::ComputeContext,           \
                                  const std::int32_t*, const std::int32_t*, BatchShape);                         \
  template std::vector<float> forward_logits<T>(FsdpEngine<T>&, const model::Transformer<T>&, model::ComputeContext, \
                                                const std::int32_t*, BatchShape, bool);                  \
  template std::vector<float> forward_logits_cached<T>(FsdpEngine<T>&, const model::Transformer<T>&,           \
                                                       model::ComputeContext, const std::int32_t*, BatchShape, \
                                                       model::KvCache<T>&);
MESHTRAIN_INSTANTIATE(float)
MESHTRAIN_INSTANTIATE(bf16)
#undef MESHTRAIN_INSTANTIATE

}  // namespace meshtrain::parallel
