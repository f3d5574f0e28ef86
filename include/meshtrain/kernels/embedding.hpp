#pragma once
/// \brief Token and position embeddings. The token table may be a vocab-parallel slice:
/// rows [vocab_start, vocab_start + vocab_local) of the logical table.

#include <cstdint>

#include "core/bf16.hpp"

namespace meshtrain::kernels {

/// out (n_tokens, C) = wte[token - vocab_start] if the token is in this slice, else 0.
/// tokens: (n_tokens) int32; wte: (vocab_local, C).
template <class T>
void embedding_forward(const std::int32_t* tokens, int n_tokens, const T* wte,
                       std::int64_t vocab_start, std::int64_t vocab_local, int C, T* out);

/// dwte (vocab_local, C) += scatter of dout (n_tokens, C) by token (only tokens in the slice).
/// Deterministic: each output element is summed in token order (no atomics).
template <class T>
void embedding_backward(const std::int32_t* tokens, int n_tokens, const T* dout,
                        std::int64_t vocab_start, std::int64_t vocab_local, int C, T* dwte);

/// x (B, T, C) += wpe[t] (position t of each sequence); wpe: (max_seq_len, C). With
/// doc_start ((B*T) device ints, packed rows) the position of token (b, t) is
/// t - doc_start[b*T + t]: each document counts from 0.
template <class T>
void add_position_embedding(T* x, const T* wpe, int B, int T_seq, int C, const std::int32_t* doc_start = nullptr);

/// dwpe (max_seq_len, C) += sum over b of dx[b, t, :] for t < T_seq (with doc_start: every
/// token's row added at its own position, in token order). Deterministic.
template <class T>
void position_embedding_backward(const T* dx, T* dwpe, int B, int T_seq, int C,
                                 const std::int32_t* doc_start = nullptr);

}  // namespace meshtrain::kernels
