#pragma once
/// \brief The model without FSDP, for the model tests that compare precisions or check
/// gradients by finite differences: parameters made on the host per unit, and one micro-batch's
/// forward and backward through the blocks in order (what parallel::forward_backward does
/// around the engine's gathers).

#include <cstdint>
#include <random>
#include <vector>

#include "core/memory.hpp"
#include "model/init.hpp"
#include "model/transformer.hpp"

namespace meshtrain::test {

/// Each unit's parameters as init_unit_range makes them (seed `init_seed`), with every norm
/// weight and bias moved off 1 and 0 by N(0, 0.1) noise from `gen`, so their gradients are
/// generic.
inline std::vector<std::vector<double>> perturbed_unit_params(const std::vector<model::ParamSpec>& specs,
                                                              const std::vector<model::UnitLayout>& layouts,
                                                              std::uint64_t init_seed, std::mt19937_64& gen) {
  std::normal_distribution<double> noise(0.0, 0.1);
  std::vector<std::vector<double>> params;
  for (const auto& L : layouts) {
    std::vector<float> init(L.padded());
    model::init_unit_range(specs, L, 1, 0, 0, L.padded(), init_seed, init.data());
    std::vector<double> p(init.begin(), init.end());
    for (const auto& s : L.slots)
      if (specs[s.spec].init != model::InitKind::Normal)
        for (std::int64_t i = 0; i < s.numel; ++i) p[s.offset + i] += noise(gen);
    params.push_back(p);
  }
  return params;
}

/// One micro-batch (device `tokens`, `targets`) through `model` on the unit buffers `p`:
/// with `g`, forward, the head's fused loss and backward (scaled by `grad_scale`), every
/// block's backward and the embedding's, the gradients added into `g`, returning the summed
/// token loss; without, the forward and the head's loss only.
template <class T>
double unwound_micro_step(const model::Transformer<T>& model, const std::vector<Buffer<T>>& p,
                          std::vector<Buffer<acc_t<T>>>* g, model::BatchShape shape, const std::int32_t* tokens,
                          const std::int32_t* targets, float grad_scale, bool checkpoint) {
  model::ComputeContext ctx;
  const int L = model.dims().n_layers;
  const std::size_t NC = static_cast<std::size_t>(shape.N()) * model.dims().d_model;
  std::vector<Buffer<T>> x;
  std::vector<model::BlockCache<T>> cache(L);
  x.emplace_back(NC, MemCategory::Activations);
  model.embed_forward(ctx, p[0].data(), tokens, shape, x[0].data());
  for (int i = 0; i < L; ++i) {
    x.emplace_back(NC, MemCategory::Activations);
    model.block_forward(ctx, i, p[1 + i].data(), shape, x[i].data(), x[i + 1].data(), cache[i], checkpoint);
  }
  if (!g) return model.head_loss(ctx, p[0].data(), shape, x[L].data(), targets);
  Buffer<T> dx(NC, MemCategory::Activations);
  const double loss = model.head_forward_backward(ctx, p[0].data(), (*g)[0].data(), shape, x[L].data(), targets,
                                                  grad_scale, dx.data());
  for (int i = L - 1; i >= 0; --i)
    model.block_backward(ctx, i, p[1 + i].data(), (*g)[1 + i].data(), shape, x[i].data(), cache[i], dx.data());
  model.embed_backward(ctx, (*g)[0].data(), tokens, shape, dx.data());
  return loss;
}

}  // namespace meshtrain::test
