#pragma once
/// \brief Rotary position embedding, Hugging Face Llama convention ("rotate_half": the
/// pair of element i is i + head_dim/2), applied in place to the heads of a row.

#include <cstdint>

#include "core/bf16.hpp"

namespace meshtrain::kernels {

/// Precomputes cos/sin tables (max_seq_len, head_dim/2) in fp32 exactly as HF does:
/// inv_freq[i] = 1 / theta^(2i/head_dim) (fp32), angle = pos * inv_freq (fp32).
/// cos_table/sin_table: device arrays of max_seq_len * head_dim/2 floats.
void rope_tables(double theta, int head_dim, int max_seq_len, float* cos_table, float* sin_table);

/// x: (B*T_seq rows, row stride ld); heads [0, n_heads) at column offset h*head_dim.
/// Position of row r is r % T_seq; with doc_start ((B*T_seq) device ints, packed rows) it is
/// r % T_seq - doc_start[r], counting from 0 at each document start. In place. Heads that
/// follow each other in a row (q's, then k's, in a fused qkv row) go in one call.
/// On GPUs one thread rotates a 16-byte pack of a head's first half (8 bf16) with the
/// matching pack of its second half where head_dim/2 is whole packs and the row stride, x
/// and the tables start on 16 bytes, unless `row_packs` (gpu.row_packs) is false; elsewhere,
/// and on host builds, a team per row goes pair by pair. Both forms give the same bits.
template <class T>
void rope_forward(T* x, int ld, int B, int T_seq, int n_heads, int head_dim,
                  const float* cos_table, const float* sin_table,
                  const std::int32_t* doc_start = nullptr, bool row_packs = true);

/// Applies the inverse rotation to the gradient in place (dx = R^T dy). Forms as rope_forward.
template <class T>
void rope_backward(T* dx, int ld, int B, int T_seq, int n_heads, int head_dim,
                   const float* cos_table, const float* sin_table,
                   const std::int32_t* doc_start = nullptr, bool row_packs = true);

}  // namespace meshtrain::kernels
