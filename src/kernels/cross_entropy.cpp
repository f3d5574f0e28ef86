#include "kernels/cross_entropy.hpp"

#include <type_traits>

#include "kernel_common.hpp"

namespace meshtrain::kernels {
using namespace detail;

namespace {

/// Number of leading columns of the slice that are real vocabulary (the rest is padding).
int valid_columns(int V_local, std::int64_t vocab_start, std::int64_t valid_vocab) {
  const std::int64_t n = valid_vocab - vocab_start;
  return n <= 0 ? 0 : (n >= V_local ? V_local : static_cast<int>(n));
}

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

template <class T, class S>
double finish_impl(T* logits, int ld, int N, int V_local, std::int64_t vocab_start,
                   std::int64_t valid_vocab, const std::int32_t* targets, const S* row_max,
                   const S* stats, float grad_scale, const float* row_scale) {
  // logits (N, V_local; ld) <- grad_scale * row_scale[r] * (softmax - onehot); returns sum of row losses.
  using A = CeAcc<T, S>;
  const int nv = valid_columns(V_local, vocab_start, valid_vocab);
  const A gs = static_cast<A>(grad_scale);
  double loss = 0;
  Kokkos::parallel_reduce(
      "Kernels::cross_entropy_finish", row_policy(N),
      KOKKOS_LAMBDA(const Member& team, double& acc) {
        const std::int64_t r = team.league_rank();
        T* lr = logits + r * ld;
        const std::int32_t tgt = targets[r];
        if (tgt < 0) {
          team_for(team, V_local, [&](int c) { lr[c] = store<T>(A(0)); });
          return;
        }
        const A mx = row_max[r];
        const A sum = stats[r];
        // DPO: each sequence's rows carry its own coefficient (negative for a rejected one).
        const A g = row_scale ? gs * A(row_scale[r]) : gs;
        const A scale = g / sum;
        const std::int64_t t = static_cast<std::int64_t>(tgt) - vocab_start;
        const bool has_target = t >= 0 && t < nv;
        const A target_logit = has_target ? A(load(lr[t])) : A(0);
        team.team_barrier();  // every thread has read the target logit before it is overwritten
        // Branch-free loops (vectorizable); the target's -grad_scale is applied afterwards.
        team_for(team, nv, [&](int c) { lr[c] = store<T>(exp_acc(A(load(lr[c]) - mx)) * scale); });
        team_for(team, V_local - nv, [&](int c) { lr[nv + c] = store<T>(A(0)); });
        team.team_barrier();
        team_single(team, [&]() {
          if (has_target) lr[t] = store<T>(exp_acc(A(target_logit - mx)) * scale - g);
          acc += static_cast<double>(math::log(sum) + mx - stats[N + r]);
        });
      },
      loss);
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
                     grad_scale, row_scale);
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
                     grad_scale, row_scale);
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
                                          const float*);
MESHTRAIN_INSTANTIATE_CROSS_ENTROPY(float)
MESHTRAIN_INSTANTIATE_CROSS_ENTROPY(double)
MESHTRAIN_INSTANTIATE_CROSS_ENTROPY(bf16)
#undef MESHTRAIN_INSTANTIATE_CROSS_ENTROPY

}  // namespace meshtrain::kernels
