#include "kernels/step_scalars.hpp"

#include "kernel_common.hpp"

namespace meshtrain::kernels {
using namespace detail;

void add_in_order(const double* parts, int n, double* acc) {
  Kokkos::parallel_for(
      "Kernels::add_in_order", RangeInt(0, 1), KOKKOS_LAMBDA(int) {
        double s = 0;
        for (int i = 0; i < n; ++i) s += parts[i];
        acc[0] += s;
      });
}

void add_scalar(double* acc, double value) {
  Kokkos::parallel_for("Kernels::add_scalar", RangeInt(0, 1), KOKKOS_LAMBDA(int) { acc[0] += value; });
}

void set_scalar(double* x, double value) {
  Kokkos::parallel_for("Kernels::set_scalar", RangeInt(0, 1), KOKKOS_LAMBDA(int) { x[0] = value; });
}

void divide_scalar(const double* x, double divisor, double* out) {
  Kokkos::parallel_for("Kernels::divide_scalar", RangeInt(0, 1), KOKKOS_LAMBDA(int) { out[0] = x[0] / divisor; });
}

void divide_by_scalar(const double* x, const double* divisor, double* out) {
  Kokkos::parallel_for("Kernels::divide_by_scalar", RangeInt(0, 1),
                       KOKKOS_LAMBDA(int) { out[0] = x[0] / divisor[0]; });
}

void fill_reciprocal(float* out, std::int64_t n, const double* divisor) {
  Kokkos::parallel_for(
      "Kernels::fill_reciprocal", Range64(0, n),
      KOKKOS_LAMBDA(std::int64_t i) { out[i] = static_cast<float>(1.0 / divisor[0]); });
}

}  // namespace meshtrain::kernels
