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
/// Deterministic: each output element is summed in token order (no atomics). The gradient is
/// acc_t<T> (fp32 for bf16 compute): every token's row is added unrounded.
/// `index`: null, or the device copy of token_grad_index() of these tokens (GPUs use it:
/// without it they read the tokens back to the host and sort them there, a round trip the
/// training step avoids by sorting where the tokens come from, train/step_batch.hpp). Host
/// builds ignore it (their form sums each column block over the tokens in order).
template <class T>
void embedding_backward(const std::int32_t* tokens, int n_tokens, const T* dout,
                        std::int64_t vocab_start, std::int64_t vocab_local, int C, acc_t<T>* dwte,
                        const std::int32_t* index = nullptr);

/// int32 elements of a token gradient index for n_tokens tokens (any tokens: a fixed size,
/// so that a CUDA graph replays with each batch's index at the same address).
std::int64_t token_grad_index_elems(int n_tokens);

/// \brief The tokens of a micro-batch grouped by vocabulary row, on the host (a stable
/// counting sort: the positions of a row stay in token order), for the GPU form of
/// embedding_backward. out (token_grad_index_elems(n_tokens) int32):
///   out[0] = R, the distinct rows of this slice that occur;
///   out[1 .. 1+R) the rows (ascending, relative to vocab_start);
///   out[1+n .. 2+n+R) their offsets into the positions (R + 1 of them);
///   out[2+2n .. 2+2n+P) the positions, P = out[1+n+R], the tokens in the slice.
/// The rest of `out` is left as it is.
void token_grad_index(const std::int32_t* tokens_host, int n_tokens, std::int64_t vocab_start,
                      std::int64_t vocab_local, std::int32_t* out);

/// The GPU form of embedding_backward with a device `index` (token_grad_index): one team per
/// possible row (min(n_tokens, vocab_local) teams, those past R return at once), each summing
/// its row's positions in token order in the accumulation type, threads over the columns.
/// Runs on any execution space (the CPU suite checks it against the host form).
template <class T>
void embedding_backward_indexed(const std::int32_t* index, int n_tokens, const T* dout, std::int64_t vocab_local,
                                int C, acc_t<T>* dwte);

/// x (B, T, C) += wpe[t] (position t of each sequence); wpe: (max_seq_len, C). With
/// doc_start ((B*T) device ints, packed rows) the position of token (b, t) is
/// t - doc_start[b*T + t]: each document counts from 0.
template <class T>
void add_position_embedding(T* x, const T* wpe, int B, int T_seq, int C, const std::int32_t* doc_start = nullptr);

/// dwpe (max_seq_len, C; acc_t<T>) += sum over b of dx[b, t, :] for t < T_seq (with doc_start:
/// every token's row added at its own position, in token order). Deterministic.
template <class T>
void position_embedding_backward(const T* dx, acc_t<T>* dwpe, int B, int T_seq, int C,
                                 const std::int32_t* doc_start = nullptr);

}  // namespace meshtrain::kernels
