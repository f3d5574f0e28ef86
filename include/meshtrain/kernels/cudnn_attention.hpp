#pragma once
/// \brief Fused causal attention through cuDNN's scaled-dot-product-attention graphs (flash
/// forward and backward, bf16 in and out, fp32 softmax, per-row log-sum-exp saved for the
/// backward, deterministic backward), built with the cuDNN frontend's C++ graph API.
///
/// Host code only: no CUDA headers here (kernels/cuda/cudnn_attention.cpp includes them), so
/// CPU builds on a machine with the CUDA toolkit compile and link it as a check. CUDA builds
/// call it from kernels::attention_forward/backward when AttentionShape::path is
/// AttentionPath::Cudnn and sdpa_layout() supports the shape; everything else takes the
/// Kokkos path, its twin on every backend (test_kernels_attention, selfcheck_paths).
///
/// Packed rows (document masks) run as cuDNN's variable-length form: a ragged layout
/// (kernels/sdpa_ragged.hpp) adds the padding mask, per-document sequence lengths and ragged
/// offsets on every operand (the statistics included), all read from a small device index
/// the caller computes on the device (kernels::sdpa_ragged_index); graphs are keyed by the
/// power-of-two document batch, not the count.
///
/// Graphs are built once per (shape, strides, direction) and cached for the process: building
/// one costs milliseconds to seconds, executing it microseconds. The caller provides each
/// call's device workspace (its size from the *_workspace functions, which build the graph):
/// CUDA builds take it from the memory pool, the CUDA link test from cudaMalloc. Operands are
/// device pointers; the work is queued on `stream` (Kokkos' CUDA stream), ordered with the
/// kernels and GEMMs around it. A graph cuDNN refuses on this device throws
/// std::runtime_error naming gpu.attention=kokkos.

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/sdpa_layout.hpp"

namespace meshtrain::kernels::cudnn {

/// Device workspace bytes of sdpa_forward (with or without statistics) for L and scale.
std::size_t sdpa_forward_workspace(const SdpaLayout& L, float scale, bool stats);

/// out = softmax(scale * q k^T, causal) v; lse (the layout's stats) per query row.
/// q, k, v, out: bf16 device pointers as passed to attention_forward (layout offsets are
/// added here); lse: fp32, nullptr for a forward that keeps no statistics (inference).
/// ragged_index: for a ragged layout (packed rows, kernels/sdpa_ragged.hpp), the device copy
/// of SdpaRagged::index_block() (stream-ordered before this call); null otherwise.
void sdpa_forward(const SdpaLayout& L, float scale, const void* q, const void* k, const void* v, void* out,
                  float* lse, void* workspace, void* stream, const void* ragged_index = nullptr);

/// Device workspace bytes of sdpa_backward for L and scale.
std::size_t sdpa_backward_workspace(const SdpaLayout& L, float scale);

/// dq, dk, dv (laid out like q, k, v; overwritten) from dout and the forward's out and lse.
/// ragged_index as for sdpa_forward.
void sdpa_backward(const SdpaLayout& L, float scale, const void* q, const void* k, const void* v, const void* out,
                   const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace, void* stream,
                   const void* ragged_index = nullptr);

/// "cuDNN 9.19.0 (frontend 1.32.0)", or why cuDNN cannot be used on this machine.
std::string version_string();

}  // namespace meshtrain::kernels::cudnn
