#include "meshtrain/parallel/micro_step.hpp"

#include <vector>

namespace meshtrain::parallel {

using model::BatchShape;
using model::BlockCache;

template <class T>
double forward_backward(FsdpEngine<T>& eng, const model::Transformer<T>& model, model::ComputeContext ctx,
                        const std::int32_t* tokens, const std::int32_t* targets, BatchShape s, float grad_scale,
                        bool checkpointing) {
  ctx.progress = [&eng] { eng.progress(); };
  const int L = model.dims().n_layers;
  const int prefetch = eng.options().prefetch;
  const std::size_t NC = static_cast<std::size_t>(s.N()) * model.dims().d_model;
  std::vector<Buffer<T>> x(L + 1);  // residual stream at every block boundary, (N, C) each
  std::vector<BlockCache<T>> cache(L);

  eng.gather(0);
  for (int k = 1; k <= prefetch; ++k) eng.gather(k, true);
  x[0] = Buffer<T>(NC, MemCategory::Activations);
  model.embed_forward(ctx, eng.wait_params(0), tokens, s, x[0].data());
  for (int i = 0; i < L; ++i) {
    const int u = 1 + i;
    eng.gather(u);
    for (int k = 1; k <= prefetch; ++k) eng.gather(u + k, true);
    const T* p = eng.wait_params(u);
    x[i + 1] = Buffer<T>(NC, MemCategory::Activations);
    model.block_forward(ctx, i, p, s, x[i].data(), x[i + 1].data(), cache[i], checkpointing);
    eng.after_forward(u);
    eng.progress();
  }
  if (L > 0 && prefetch > 0) eng.gather(L, true);  // first block of backward, during the head

  Buffer<T> dx(NC, MemCategory::Activations);
  const double loss = model.head_forward_backward(ctx, eng.wait_params(0), eng.grad_buffer(0), s, x[L].data(),
                                                  targets, grad_scale, dx.data());
  eng.after_forward(0);
  x[L].reset();

  for (int i = L - 1; i >= 0; --i) {
    const int u = 1 + i;
    eng.gather(u);
    for (int k = 1; k <= prefetch && u - k >= 1; ++k) eng.gather(u - k, true);
    const T* p = eng.wait_params(u);
    model.block_backward(ctx, i, p, eng.grad_buffer(u), s, x[i].data(), cache[i], dx.data());
    eng.after_backward(u);
    if (i > 0) x[i].reset();
    eng.progress();
  }
  model.embed_backward(ctx, eng.grad_buffer(0), tokens, s, dx.data());
  eng.after_backward(0);
  eng.progress();
  return loss;
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
  model.embed_forward(ctx, eng.wait_params(0), tokens, s, x.data(), kv ? kv->filled : 0);
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
  const double loss = model.head_loss(ctx, eng.wait_params(0), s, x.data(), targets);
  eng.release_all();
  return loss;
}

template <class T>
std::vector<float> forward_logits(FsdpEngine<T>& eng, const model::Transformer<T>& model, model::ComputeContext ctx,
                                  const std::int32_t* tokens, BatchShape s, bool last_only) {
  ctx.progress = [&eng] { eng.progress(); };
  Buffer<T> x = forward_to_last(eng, model, ctx, tokens, s);
  std::vector<float> logits = model.logits(ctx, eng.wait_params(0), s, x.data(), last_only);
  eng.release_all();
  return logits;
}

template <class T>
std::vector<float> forward_logits_cached(FsdpEngine<T>& eng, const model::Transformer<T>& model,
                                         model::ComputeContext ctx, const std::int32_t* tokens, BatchShape s,
                                         model::KvCache<T>& kv) {
  ctx.progress = [&eng] { eng.progress(); };
  Buffer<T> x = forward_to_last(eng, model, ctx, tokens, s, &kv);
  std::vector<float> logits = model.logits(ctx, eng.wait_params(0), s, x.data(), /*last_only=*/true);
  eng.release_all();
  return logits;
}

#define MESHTRAIN_INSTANTIATE(T)                                                                                 \
  template double forward_backward<T>(FsdpEngine<T>&, const model::Transformer<T>&, model::ComputeContext,       \
                                      const std::int32_t*, const std::int32_t*, BatchShape, float, bool);        \
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
