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
/// r % T_seq - doc_start[r], counting from 0 at each document start. In place.
template <class T>
void rope_forward(T* x, int ld, int B, int T_seq, int n_heads, int head_dim,
                  const float* cos_table, const float* sin_table,
                  const std::int32_t* doc_start = nullptr);

/// Applies the inverse rotation to the gradient in place (dx = R^T dy).
template <class T>
void rope_backward(T* dx, int ld, int B, int T_seq, int n_heads, int head_dim,
                   const float* cos_table, const float* sin_table,
                  const std::int32_t* doc_start = nullptr);

}  // namespace meshtrain::kernels
