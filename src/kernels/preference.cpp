#include "kernels/preference.hpp"

#include "kernel_common.hpp"

namespace meshtrain::kernels {
using namespace detail;

void preference_pairs(const PairLoss& loss, int B, int T, const double* policy, const double* reference,
                      const double* lengths, double pair_scale, double* sums, float* coef, float* row_scale) {
  const int pairs = B / 2;
  // One thread: the sums in pair order, as the host twin adds them.
  Kokkos::parallel_for(
      "Kernels::preference_pairs", RangeInt(0, 1), KOKKOS_LAMBDA(int) {
        for (int j = 0; j < pairs; ++j) {
          const int c = 2 * j, r = c + 1;
          const PairTerms t = pair_terms(loss, policy[c], policy[r], reference ? reference[c] : 0.0,
                                         reference ? reference[r] : 0.0, lengths ? lengths[c] : 1.0,
                                         lengths ? lengths[r] : 1.0, pair_scale);
          add_pair(sums, t, policy[c], policy[r]);
          coef[c] = static_cast<float>(t.coef_c);
          coef[r] = static_cast<float>(t.coef_r);
        }
        for (int b = 2 * pairs; b < B; ++b) coef[b] = 0.0f;
      });
  const std::int64_t n = static_cast<std::int64_t>(B) * T;
  Kokkos::parallel_for(
      "Kernels::preference_row_scale", Range64(0, n), KOKKOS_LAMBDA(std::int64_t i) { row_scale[i] = coef[i / T]; });
}

void sequence_lengths(const std::int32_t* targets, int B, int T, double* lengths) {
  Kokkos::parallel_for(
      "Kernels::sequence_lengths", RangeInt(0, B), KOKKOS_LAMBDA(int b) {
        std::int64_t n = 0;
        for (int t = 0; t < T; ++t) n += targets[static_cast<std::int64_t>(b) * T + t] >= 0 ? 1 : 0;
        lengths[b] = static_cast<double>(n);
      });
}

template <class A>
void sequence_logps(const A* losses, int B, int T, double* logp) {
  Kokkos::parallel_for(
      "Kernels::sequence_logps", RangeInt(0, B), KOKKOS_LAMBDA(int b) {
        double s = 0.0;
        for (int t = 0; t < T; ++t) s -= static_cast<double>(losses[static_cast<std::int64_t>(b) * T + t]);
        logp[b] = s;
      });
}
template void sequence_logps<float>(const float*, int, int, double*);
template void sequence_logps<double>(const double*, int, int, double*);

void zero_sums(double* sums, int n) {
  Kokkos::parallel_for("Kernels::zero_sums", RangeInt(0, n), KOKKOS_LAMBDA(int i) { sums[i] = 0.0; });
}

}  // namespace meshtrain::kernels
