#pragma once
/// \brief The tanh-approximated GELU (GPT-2's "gelu_new") of one element, in the accumulator
/// type: the one definition behind gelu_forward/gelu_backward and the fused bias + GELU and
/// dGELU + bias-gradient passes (kernels/elementwise.hpp), so the fused and unfused forms
/// round alike. cuBLASLt's GELU epilogues use the same tanh approximation
/// (linalg/gemm_epilogue.hpp).
///
/// Computed through the sigmoid: 0.5 (1 + tanh(u)) = sigmoid(2u), so
///   y = x sigmoid(2u),  y' = s + 2 x s (1 - s) u',  s = sigmoid(2u), u' = k (1 + 3 c x^2),
/// with u = k (x + c x^3), k = sqrt(2/pi), c = 0.044715. Same function as the tanh form,
/// without the cancellation in 1 + tanh(u) for x < 0, and with one exp (vectorizable on
/// host) instead of a libm tanh.

#include "kernel_common.hpp"

namespace meshtrain::kernels::detail {

template <class A>
struct GeluTanh {
  static constexpr A kSqrt2OverPi = A(0.7978845608028654);
  static constexpr A kCoeff = A(0.044715);

  /// gelu(v)
  KOKKOS_FORCEINLINE_FUNCTION static A value(A v) {
    const A u = kSqrt2OverPi * (v + kCoeff * v * v * v);
    return v / (A(1) + exp_acc(A(-2) * u));
  }
  /// gelu'(v)
  KOKKOS_FORCEINLINE_FUNCTION static A derivative(A v) {
    const A u = kSqrt2OverPi * (v + kCoeff * v * v * v);
    const A s = A(1) / (A(1) + exp_acc(A(-2) * u));
    const A du = kSqrt2OverPi * (A(1) + A(3) * kCoeff * v * v);
    return s + A(2) * v * s * (A(1) - s) * du;
  }
};

}  // namespace meshtrain::kernels::detail
