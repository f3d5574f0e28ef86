#include "model/lora.hpp"

#include "linalg/gemm.hpp"

namespace meshtrain::model {

using linalg::Op;

template <class T>
void lora_forward_column(const LoraShape& s, const T* x, int ldx, const T* A, const T* B, T* y, int ldy, T* u) {
  linalg::gemm<T>(Op::N, Op::T, s.N, s.r, s.in, 1.0f, x, ldx, A, s.in, 0.0f, u, s.r);
  linalg::gemm<T>(Op::N, Op::T, s.N, s.out, s.r, s.scale, u, s.r, B, s.r, 1.0f, y, ldy);
}

template <class T>
void lora_forward_row(const ComputeContext& ctx, int tp_rank, const LoraShape& s, const T* x, int ldx, const T* A,
                      const T* B, T* y, int ldy, T* u) {
  linalg::gemm<T>(Op::N, Op::T, s.N, s.r, s.in, 1.0f, x, ldx, A, s.in, 0.0f, u, s.r);
  ctx.tp_all_reduce(u, static_cast<std::size_t>(s.N) * s.r);
  // y is a partial sum over tp that is all-reduced next: one rank contributes the term.
  if (tp_rank == 0) linalg::gemm<T>(Op::N, Op::T, s.N, s.out, s.r, s.scale, u, s.r, B, s.r, 1.0f, y, ldy);
}

template <class T>
void lora_backward(const LoraShape& s, const T* x, int ldx, const T* A, const T* B, const T* dy, int lddy, const T* u,
                   acc_t<T>* dA, acc_t<T>* dB, T* dx, int lddx, T* du) {
  linalg::gemm_acc<T>(Op::T, Op::N, s.out, s.r, s.N, s.scale, dy, lddy, u, s.r, 1.0f, dB, s.r);
  linalg::gemm<T>(Op::N, Op::N, s.N, s.r, s.out, s.scale, dy, lddy, B, s.r, 0.0f, du, s.r);
  linalg::gemm_acc<T>(Op::T, Op::N, s.r, s.in, s.N, 1.0f, du, s.r, x, ldx, 1.0f, dA, s.in);
  linalg::gemm<T>(Op::N, Op::N, s.N, s.in, s.r, 1.0f, du, s.r, A, s.in, 1.0f, dx, lddx);
}

#define MESHTRAIN_INSTANTIATE(T)                                                                                  \
  template void lora_forward_column<T>(const LoraShape&, const T*, int, const T*, const T*, T*, int, T*);        \
  template void lora_forward_row<T>(const ComputeContext&, int, const LoraShape&, const T*, int, const T*,       \
                                    const T*, T*, int, T*);                                                       \
  template void lora_backward<T>(const LoraShape&, const T*, int, const T*, const T*, const T*, int, const T*,    \
                                 acc_t<T>*, acc_t<T>*, T*, int, T*);
MESHTRAIN_INSTANTIATE(float)
MESHTRAIN_INSTANTIATE(double)
MESHTRAIN_INSTANTIATE(bf16)
#undef MESHTRAIN_INSTANTIATE

}  // namespace meshtrain::model
