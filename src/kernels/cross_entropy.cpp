#include "kernels/cross_entropy.hpp"

#include <type_traits>

#include "cross_entropy_rows.hpp"

namespace meshtrain::kernels {
using namespace detail;

namespace {

/// The phases with statistics of type S (float, or double for double logits); the row
/// arithmetic is done in A = the wider of acc_t<T> and S.
template <class T, class S>
using CeAcc = std::conditional_t<(sizeof(S) > sizeof(acc_t<T>)), S, acc_t<T>>;

template <class T, class S>
void row_max_impl(const T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                  std::int64_t valid_vocab, S* row_max) {
  // logits: (N, V_local; ld) -> row_max: (N)
  using A = CeAcc<T, S>;
  const int nv = valid_columns(V_local, vocab_start, valid_vocab);
  Kokkos::parallel_for(
      "Kernels::cross_entropy_row_max", row_policy(N), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const T* lr = logits + r * ld;
        const A mx = team_max<A>(team, nv, -math::infinity<A>(), [&](int c) { return load(lr[c]); });
        team_single(team, [&]() { row_max[r] = static_cast<S>(mx); });
      });
}

template <class T, class S>
void row_sums_impl(const T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                   std::int64_t valid_vocab, const std::int32_t* targets, const S* row_max,
                   S* stats) {
  // stats: (2N) = [sum exp(l - row_max) | target logit or 0]
  using A = CeAcc<T, S>;
  const int nv = valid_columns(V_local, vocab_start, valid_vocab);
  Kokkos::parallel_for(
      "Kernels::cross_entropy_row_sums", row_policy(N), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t r = team.league_rank();
        const T* lr = logits + r * ld;
        const A mx = row_max[r];
        const A sum = team_sum<A>(team, nv, [&](int c) { return exp_acc(A(load(lr[c]) - mx)); });
        team_single(team, [&]() {
          const std::int64_t t = static_cast<std::int64_t>(targets[r]) - vocab_start;
          stats[r] = static_cast<S>(sum);
          stats[N + r] = static_cast<S>((targets[r] >= 0 && t >= 0 && t < nv) ? A(load(lr[t])) : A(0));
        });
      });
}

/// Writes the gradient; the sum of the row losses is returned (loss_out null: read back to
/// the host) or written to the device scalar *loss_out (no host read).
template <class T, class S>
double finish_impl(T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                   std::int64_t valid_vocab, const std::int32_t* targets, const S* row_max,
                   const S* stats, float grad_scale, const float* row_scale, double* loss_out) {
  // logits (N, V_local; ld) <- grad_scale * row_scale[r] * (softmax - onehot); returns sum of row losses.
  using A = CeAcc<T, S>;
  const int nv = valid_columns(V_local, vocab_start, valid_vocab);
  const A gs = static_cast<A>(grad_scale);
  const auto body = KOKKOS_LAMBDA(const Member& team, double& acc) {
    const std::int64_t r = team.league_rank();
    T* lr = logits + r * ld;
    const std::int32_t tgt = targets[r];
    if (zero_untargeted_row<A>(team, lr, V_local, tgt)) return;
    const A g = row_coefficient(gs, row_scale, r);
    const std::int64_t t = static_cast<std::int64_t>(tgt) - vocab_start;
    const bool has_target = t >= 0 && t < nv;
    const A target_logit = has_target ? A(load(lr[t])) : A(0);
    write_row_gradient<A>(team, lr, V_local, nv, t, has_target, target_logit, A(row_max[r]), A(stats[r]), g);
    team_single(team, [&]() { acc += static_cast<double>(math::log(A(stats[r])) + A(row_max[r]) - A(stats[N + r])); });
  };
  if (loss_out) {
    Kokkos::parallel_reduce("Kernels::cross_entropy_finish", row_policy(N), body,
                            Kokkos::View<double, DeviceMem, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(loss_out));
    return 0;
  }
  double loss = 0;
  Kokkos::parallel_reduce("Kernels::cross_entropy_finish", row_policy(N), body, loss);
  return loss;
}

template <class S>
double loss_sum_impl(int N, const std::int32_t* targets, const S* row_max, const S* stats) {
  double loss = 0;
  Kokkos::parallel_reduce(
      "Kernels::cross_entropy_loss_sum", RangeInt(0, N),
      KOKKOS_LAMBDA(int r, double& acc) {
        if (targets[r] >= 0) acc += static_cast<double>(math::log(stats[r]) + row_max[r] - stats[N + r]);
      },
      loss);
  return loss;
}

template <class S>
void row_losses_impl(int N, const std::int32_t* targets, const S* row_max, const S* stats, S* losses) {
  Kokkos::parallel_for(
      "Kernels::cross_entropy_row_losses", RangeInt(0, N), KOKKOS_LAMBDA(int r) {
        losses[r] = targets[r] >= 0 ? math::log(stats[r]) + row_max[r] - stats[N + r] : S(0);
      });
}

}  // namespace

template <class T>
void cross_entropy_row_max(const T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                           std::int64_t valid_vocab, float* row_max) {
  row_max_impl(logits, ld, N, V_local, vocab_start, valid_vocab, row_max);
}
template <class T>
void cross_entropy_row_sums(const T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                            std::int64_t valid_vocab, const std::int32_t* targets,
                            const float* row_max, float* stats) {
  row_sums_impl(logits, ld, N, V_local, vocab_start, valid_vocab, targets, row_max, stats);
}
template <class T>
double cross_entropy_finish(T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                            std::int64_t valid_vocab, const std::int32_t* targets,
                            const float* row_max, const float* stats, float grad_scale,
                            const float* row_scale) {
  return finish_impl(logits, ld, N, V_local, vocab_start, valid_vocab, targets, row_max, stats,
                     grad_scale, row_scale, nullptr);
}
template <class T>
void cross_entropy_finish_into(T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                               std::int64_t valid_vocab, const std::int32_t* targets,
                               const acc_t<T>* row_max, const acc_t<T>* stats, float grad_scale,
                               const float* row_scale, double* loss_out) {
  finish_impl(logits, ld, N, V_local, vocab_start, valid_vocab, targets, row_max, stats, grad_scale,
              row_scale, loss_out);
}
double cross_entropy_loss_sum(int N, const std::int32_t* targets, const float* row_max,
                              const float* stats) {
  return loss_sum_impl(N, targets, row_max, stats);
}

void cross_entropy_row_max(const double* logits, int ld, int N, int V_local,
                           std::int64_t vocab_start, std::int64_t valid_vocab, double* row_max) {
  row_max_impl(logits, ld, N, V_local, vocab_start, valid_vocab, row_max);
}
void cross_entropy_row_sums(const double* logits, int ld, int N, int V_local,
                            std::int64_t vocab_start, std::int64_t valid_vocab,
                            const std::int32_t* targets, const double* row_max, double* stats) {
  row_sums_impl(logits, ld, N, V_local, vocab_start, valid_vocab, targets, row_max, stats);
}
double cross_entropy_finish(double* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                            std::int64_t valid_vocab, const std::int32_t* targets,
                            const double* row_max, const double* stats, float grad_scale,
                            const float* row_scale) {
  return finish_impl(logits, ld, N, V_local, vocab_start, valid_vocab, targets, row_max, stats,
                     grad_scale, row_scale, nullptr);
}
double cross_entropy_loss_sum(int N, const std::int32_t* targets, const double* row_max,
                              const double* stats) {
  return loss_sum_impl(N, targets, row_max, stats);
}
void cross_entropy_row_losses(int N, const std::int32_t* targets, const float* row_max, const float* stats,
                              float* losses) {
  row_losses_impl(N, targets, row_max, stats, losses);
}
void cross_entropy_row_losses(int N, const std::int32_t* targets, const double* row_max, const double* stats,
                              double* losses) {
  row_losses_impl(N, targets, row_max, stats, losses);
}

#define MESHTRAIN_INSTANTIATE_CROSS_ENTROPY(T)                                                   \
  template void cross_entropy_row_max<T>(const T*, int, int, int, std::int64_t, std::int64_t,   \
                                         float*);                                                \
  template void cross_entropy_row_sums<T>(const T*, int, int, int, std::int64_t, std::int64_t,  \
                                          const std::int32_t*, const float*, float*);            \
  template double cross_entropy_finish<T>(T*, int, int, int, std::int64_t, std::int64_t,        \
                                          const std::int32_t*, const float*, const float*, float,        \
                                          const float*);                                         \
  template void cross_entropy_finish_into<T>(T*, int, int, int, std::int64_t, std::int64_t,     \
                                             const std::int32_t*, const acc_t<T>*, const acc_t<T>*, \
                                             float, const float*, double*);
MESHTRAIN_INSTANTIATE_CROSS_ENTROPY(float)
MESHTRAIN_INSTANTIATE_CROSS_ENTROPY(double)
MESHTRAIN_INSTANTIATE_CROSS_ENTROPY(bf16)
#undef MESHTRAIN_INSTANTIATE_CROSS_ENTROPY

}  // namespace meshtrain::kernels
