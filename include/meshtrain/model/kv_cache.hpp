#pragma once
/// \brief Keys and values of the positions already processed, per layer, for incremental
/// decoding (generation): the prompt is run once (prefill) and each new token then attends
/// to the cache instead of recomputing the whole prefix.
///
/// Under tensor parallelism each rank caches the kv heads it computes (its own heads, or
/// all of them when GQA kv heads are replicated over tp). Llama keys are stored after RoPE
/// (rotated at their own positions), so cached keys never need rotating again.

#include <vector>

#include "core/memory.hpp"
#include "model/model_dims.hpp"

namespace meshtrain::model {

template <class T>
struct KvCache {
  int B = 0;        ///< sequences
  int T_max = 0;    ///< positions the cache has room for (<= model.max_seq_len)
  int kv_heads = 0; ///< local kv heads per layer
  int filled = 0;   ///< positions [0, filled) hold keys and values
  std::vector<Buffer<T>> k, v;  ///< per layer: (B, kv_heads, T_max, head_dim), compute dtype

  KvCache() = default;
  KvCache(const ModelDims& dims, const TpDims& tp, int sequences, int max_positions)
      : B(sequences), T_max(max_positions), kv_heads(dims.family == Family::Gpt2 ? tp.heads : tp.kv_heads) {
    const std::size_t n = static_cast<std::size_t>(B) * kv_heads * T_max * dims.head_dim;
    for (int i = 0; i < dims.n_layers; ++i) {
      k.emplace_back(n, MemCategory::Activations);
      v.emplace_back(n, MemCategory::Activations);
    }
  }
};

}  // namespace meshtrain::model
