#pragma once
/// \brief Activations a block saves in forward for its backward (all from the memory pool,
/// category Activations). With activation checkpointing only the block input is kept and
/// the rest is recomputed in backward.

#include <vector>

#include "core/memory.hpp"

namespace meshtrain::model {

/// Saved tensors of one transformer block. N = B*T tokens; Cl/Fl/Wqkv are TP-local widths.
template <class T>
struct BlockCache {
  Buffer<T> norm1;             ///< (N, C) output of the first norm
  Buffer<acc_t<T>> mean1;      ///< (N) LayerNorm mean (gpt2)
  Buffer<acc_t<T>> rstd1;      ///< (N)
  Buffer<T> qkv;               ///< (N, Wqkv) projections (llama: after RoPE)
  Buffer<acc_t<T>> attn_stats; ///< (B, Hl, T, 2) per query row the softmax's max and 1 / sum
  Buffer<T> attn_out;          ///< (N, Hl*hd) attention output before the out-projection
  Buffer<T> x_mid;             ///< (N, C) residual after attention
  Buffer<T> norm2;             ///< (N, C)
  Buffer<acc_t<T>> mean2;      ///< (N)
  Buffer<acc_t<T>> rstd2;      ///< (N)
  Buffer<T> mlp_in;            ///< gpt2: (N, Fl) pre-GELU; llama: (N, 2Fl) gate|up
  Buffer<T> mlp_act;           ///< (N, Fl) GELU / SwiGLU output
  std::vector<Buffer<T>> lora_u;  ///< (N, r) x A^T of each LoRA target (index = target)
  bool filled = false;

  void clear() { *this = BlockCache(); }
};

/// Saved tensors of the final norm + head (the head runs forward and backward at once).
template <class T>
struct HeadCache {
  Buffer<T> normed;            ///< (N, C)
  Buffer<acc_t<T>> mean;       ///< (N)
  Buffer<acc_t<T>> rstd;       ///< (N)
};

}  // namespace meshtrain::model
