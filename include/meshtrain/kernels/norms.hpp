#pragma once
/// \brief LayerNorm (GPT-2) and RMSNorm (Llama) over the last dimension C.
/// Saved statistics are in acc_t<T>: mean and rstd (LayerNorm), rstd (RMSNorm).

#include "core/bf16.hpp"

namespace meshtrain::kernels {

/// y (N, C) = (x - mean) * rstd * w + b;  mean, rstd: (N) saved for backward.
template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, double eps, int N, int C, T* y,
                       acc_t<T>* mean, acc_t<T>* rstd);

/// dx (N, C) += dL/dx (ACCUMULATES: the residual stream's gradient is already in dx);
/// dw, db (C) += parameter gradients, in acc_t<T> (fp32 for bf16: gradients accumulate
/// unrounded across micro-steps), deterministic, no atomics; both nullptr: frozen, skipped.
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* mean,
                        const acc_t<T>* rstd, int N, int C, T* dx, acc_t<T>* dw, acc_t<T>* db);

/// y (N, C) = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps): (N) saved.
template <class T>
void rmsnorm_forward(const T* x, const T* w, double eps, int N, int C, T* y, acc_t<T>* rstd);

/// dx (N, C) += dL/dx (ACCUMULATES); dw (C, acc_t<T>) += (deterministic); dw nullptr:
/// frozen, skipped.
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const acc_t<T>* rstd, int N, int C,
                      T* dx, acc_t<T>* dw);

}  // namespace meshtrain::kernels
