#pragma once
/// \brief Which form of the model's fusable kernels a Transformer runs (the gpu.* keys that
/// reach the model; doc/configuration.md). Each defaults to the fused path; false selects the
/// path it replaced, which stays as the reference and the fallback when a fused kernel
/// misbehaves on a device. Both forms are portable Kokkos code, so on host builds the fused
/// path is its own host twin.

#include "kernels/norms.hpp"

namespace meshtrain::model {

struct KernelPaths {
  /// gpu.fused_loss: one-pass online-softmax cross-entropy (kernels/cross_entropy_online.hpp)
  /// with the chunk losses kept on the device, instead of the three-pass form.
  bool fused_loss = true;
  /// gpu.fused_norms: inside a block, the attention residual add (and GPT-2's projection
  /// bias) fused with the second norm, forward and backward (kernels/residual_norms.hpp),
  /// instead of add_bias + add_inplace + the norm and its column-sum backward.
  bool fused_norms = true;
  /// gpu.epilogues: GPT-2's biases, GELU and their gradients done by the GEMMs
  /// (linalg/gemm_epilogue.hpp: cuBLASLt epilogues on CUDA builds, the GEMM then one fused
  /// pass on host builds), instead of add_bias, gelu_forward, gelu_backward, bias_backward.
  bool epilogues = true;
  /// gpu.norm_form: how every LayerNorm/RMSNorm kernel (fused or not) spreads rows -- a warp
  /// per row on GPUs, a team (host thread) per row on host builds by default.
  kernels::NormForm norm_form = kernels::default_norm_form();
  /// gpu.row_packs: the row kernels that can (the norms' Warps form; on GPUs the fused
  /// cross-entropy) move rows in 16-byte packs where every row starts on 16 bytes; false:
  /// element by element, the fallback should the packed kernels fail on a device.
  bool row_packs = true;
};

}  // namespace meshtrain::model
