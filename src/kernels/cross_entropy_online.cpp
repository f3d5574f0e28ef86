#include "kernels/cross_entropy_online.hpp"

#include "cross_entropy_rows.hpp"

namespace meshtrain::kernels {
using namespace detail;

namespace {

template <int K, class T>
void online_stats_kernel(const T* logits, int ld, int N, int nv, std::int64_t vocab_start,
                         const std::int32_t* targets, acc_t<T>* local_max, acc_t<T>* row_max, acc_t<T>* stats) {
  using A = acc_t<T>;
  Kokkos::parallel_for(
      K > 1 ? "Kernels::cross_entropy_online_stats_packs" : "Kernels::cross_entropy_online_stats", row_policy(N),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const T* lr = logits + r * ld;
        const std::int32_t tgt = targets[r];
        // An ignored row's statistics are never used (its loss and gradient are 0).
        const RowStats<A> st =
            tgt >= 0 ? online_row_stats<A, K>(team, lr, nv) : RowStats<A>{-math::infinity<A>(), A(0)};
        team_single(team, [&]() {
          const std::int64_t t = static_cast<std::int64_t>(tgt) - vocab_start;
          local_max[r] = st.max;
          row_max[r] = st.max;
          stats[r] = st.sum;
          stats[N + r] = (tgt >= 0 && t >= 0 && t < nv) ? A(load(lr[t])) : A(0);
        });
      });
}

template <int K, class T>
void fused_kernel(T* logits, int ld, int N, int V_local, int nv, const std::int32_t* targets, float grad_scale,
                  const float* row_scale, double* loss_out) {
  using A = acc_t<T>;
  const A gs = static_cast<A>(grad_scale);
  Kokkos::parallel_reduce(
      K > 1 ? "Kernels::cross_entropy_fused_packs" : "Kernels::cross_entropy_fused", row_policy(N),
      KOKKOS_LAMBDA(const Member& team, double& acc) {
        const std::int64_t r = team.league_rank();
        T* lr = logits + r * ld;
        const std::int32_t tgt = targets[r];
        if (zero_untargeted_row<A>(team, lr, V_local, tgt)) return;
        const RowStats<A> st = online_row_stats<A, K>(team, lr, nv);
        const A g = row_coefficient(gs, row_scale, r);
        const bool has_target = tgt < nv;
        const A target_logit = has_target ? A(load(lr[tgt])) : A(0);
        write_row_gradient<A, K>(team, lr, V_local, nv, tgt, has_target, target_logit, st.max, st.sum, g);
        team_single(team, [&]() { acc += static_cast<double>(math::log(st.sum) + st.max - target_logit); });
      },
      Kokkos::View<double, DeviceMem, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(loss_out));
}

}  // namespace

template <class T>
void cross_entropy_online_stats(const T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                                std::int64_t valid_vocab, const std::int32_t* targets, acc_t<T>* local_max,
                                acc_t<T>* row_max, acc_t<T>* stats, bool row_packs) {
  // logits: (N, V_local; ld) -> local_max, row_max: (N), stats: (2N)
  const int nv = valid_columns(V_local, vocab_start, valid_vocab);
  if constexpr (!kHostExec) {
    if (row_packs && ce_rows_packable(logits, ld, V_local)) {
      online_stats_kernel<kPackWidth<T>>(logits, ld, N, nv, vocab_start, targets, local_max, row_max, stats);
      return;
    }
  }
  online_stats_kernel<1>(logits, ld, N, nv, vocab_start, targets, local_max, row_max, stats);
}

template <class S>
void cross_entropy_rescale_sums(int N, const S* local_max, const S* row_max, S* stats) {
  // stats (2N): [0, N) rescaled from the slice's own max to the reduced one.
  Kokkos::parallel_for(
      "Kernels::cross_entropy_rescale_sums", RangeInt(0, N), KOKKOS_LAMBDA(int r) {
        // A slice without valid columns (sum 0, max -inf) adds nothing (and no exp(-inf + inf)).
        stats[r] = stats[r] > S(0) ? stats[r] * exp_acc(S(local_max[r] - row_max[r])) : S(0);
      });
}

template <class T>
void cross_entropy_fused(T* logits, int ld, int N, int V_local, std::int64_t valid_vocab,
                         const std::int32_t* targets, float grad_scale, const float* row_scale,
                         double* loss_out, bool row_packs) {
  // logits (N, V_local; ld) <- grad_scale * row_scale[r] * (softmax - onehot); *loss_out = sum of row losses.
  const int nv = valid_columns(V_local, 0, valid_vocab);
  if constexpr (!kHostExec) {
    if (row_packs && ce_rows_packable(logits, ld, V_local)) {
      fused_kernel<kPackWidth<T>>(logits, ld, N, V_local, nv, targets, grad_scale, row_scale, loss_out);
      return;
    }
  }
  fused_kernel<1>(logits, ld, N, V_local, nv, targets, grad_scale, row_scale, loss_out);
}

template void cross_entropy_rescale_sums<float>(int, const float*, const float*, float*);
template void cross_entropy_rescale_sums<double>(int, const double*, const double*, double*);

#define MESHTRAIN_INSTANTIATE_CROSS_ENTROPY_ONLINE(T)                                                      \
  template void cross_entropy_online_stats<T>(const T*, int, int, int, std::int64_t, std::int64_t,       \
                                              const std::int32_t*, acc_t<T>*, acc_t<T>*, acc_t<T>*, bool); \
  template void cross_entropy_fused<T>(T*, int, int, int, std::int64_t, const std::int32_t*, float,      \
                                       const float*, double*, bool);
MESHTRAIN_INSTANTIATE_CROSS_ENTROPY_ONLINE(float)
MESHTRAIN_INSTANTIATE_CROSS_ENTROPY_ONLINE(double)
MESHTRAIN_INSTANTIATE_CROSS_ENTROPY_ONLINE(bf16)
#undef MESHTRAIN_INSTANTIATE_CROSS_ENTROPY_ONLINE

}  // namespace meshtrain::kernels
