#pragma once
/// \brief Elementwise and small reduction kernels (Kokkos, default execution space).
/// All pointers are device pointers. T = float, double or bf16 unless stated; math is done
/// in acc_t<T> (float for bf16/float, double for double). "ld" = row stride in elements.

#include <cstddef>
#include <cstdint>

#include "core/bf16.hpp"

namespace meshtrain::kernels {

/// out[i] = static_cast<Out>(in[i]) for i < n (fp32<->bf16, fp32<->fp64, ...).
template <class In, class Out>
void cast(const In* in, Out* out, std::size_t n);

/// y[i] += x[i]
template <class T>
void add_inplace(T* y, const T* x, std::size_t n);

/// y[i] += x[i] in the accumulation type (a bf16 partial added into an fp32 gradient).
template <class T>
void add_widened(acc_t<T>* y, const T* x, std::size_t n);

/// x[i] *= s
template <class T>
void scale_inplace(T* x, std::size_t n, double s);

/// x[i] = value
template <class T>
void fill(T* x, std::size_t n, double value);

/// x[i] = lo + (hi - lo) * u_i, u_i in [0, 1) from a counter-based hash of (seed, i)
/// (splitmix64; 24 bits, so every u_i is exact in float): the same values on every backend
/// and thread count. For GEMM timing operands (a peak measured on constant operands reads
/// high on GPUs, whose power draw depends on the bits that toggle).
template <class T>
void fill_uniform(T* x, std::size_t n, double lo, double hi, std::uint64_t seed);

/// The u_i of fill_uniform (host; the kernel's reference).
double uniform_at(std::uint64_t seed, std::uint64_t i);

/// y (rows, cols; ld) += bias (cols) broadcast over rows.
template <class T>
void add_bias(T* y, const T* bias, int rows, int cols, int ld);

/// dbias (cols) += sum over rows of dy (rows, cols; ld). Deterministic (no atomics); nullptr: skipped.
/// Parameter gradients are acc_t<T> (fp32 for bf16 compute: they accumulate unrounded).
template <class T>
void bias_backward(const T* dy, acc_t<T>* dbias, int rows, int cols, int ld);

/// GELU, tanh approximation (GPT-2 "gelu_new"): y = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
/// x, y: (n). In place allowed (y == x).
template <class T>
void gelu_forward(const T* x, T* y, std::size_t n);
/// dx = dy * gelu'(x) (overwrite; dx may alias dy).
template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::size_t n);

/// add_bias then gelu_forward in one pass (the bias + GELU epilogue of a GEMM's portable
/// form, linalg/gemm_epilogue.hpp): pre (rows, cols; ld_pre) += bias (cols), then
/// act (rows, cols; ld_act) = gelu(pre). Rounds like the two kernels (bit for bit).
template <class T>
void bias_gelu_forward(T* pre, int ld_pre, const T* bias, T* act, int ld_act, int rows, int cols);
/// gelu_backward then bias_backward in one pass (the dGELU + bias-gradient epilogue's
/// portable form): d (rows, cols; ld_d) = d * gelu'(pre (rows, cols; ld_pre)) in place, and
/// dbias (cols) += the column sums of the new d, in row order (deterministic, bit for bit the
/// two kernels). dbias (acc_t<T>) nullptr: the GELU backward alone.
template <class T>
void gelu_backward_bias_grad(const T* pre, int ld_pre, T* d, int ld_d, acc_t<T>* dbias, int rows, int cols);

/// SwiGLU: out (rows, cols; ld_out) = silu(gate) * up, where gate and up are (rows, cols)
/// with row stride ld_in (they are usually the two halves of one GEMM output).
/// On GPUs one thread moves each 16-byte pack of a row (8 bf16) where every row of every
/// operand starts on 16 bytes and holds whole packs, unless `row_packs` (gpu.row_packs) is
/// false; elsewhere, and on host builds, a team per row goes element by element. The two
/// forms compute every element alike (the same bits).
template <class T>
void swiglu_forward(const T* gate, const T* up, int ld_in, T* out, int ld_out, int rows, int cols,
                    bool row_packs = true);
/// dgate, dup (rows, cols; ld_in) = gradients of the SwiGLU inputs (overwrite); they may be
/// gate and up themselves. Forms as swiglu_forward.
template <class T>
void swiglu_backward(const T* gate, const T* up, int ld_in, const T* dout, int ld_out, T* dgate,
                     T* dup, int rows, int cols, bool row_packs = true);

/// Sum of squares of x (n) in double (deterministic for a fixed thread count). NaN/Inf propagate.
template <class T>
double sum_squares(const T* x, std::size_t n);

}  // namespace meshtrain::kernels
