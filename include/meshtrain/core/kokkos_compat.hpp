#pragma once
/// \brief The one place where Kokkos 3.4 (Debian/Trilinos, CI) and Kokkos 4.x (Spack,
/// CUDA builds) differ for meshtrain: initialization settings and math functions.
/// Everything else in the code uses API common to both.

#include <string>

#include <Kokkos_Core.hpp>

#if KOKKOS_VERSION >= 30700
#define MESHTRAIN_KOKKOS_MATH_NS Kokkos
#else
#define MESHTRAIN_KOKKOS_MATH_NS Kokkos::Experimental
#endif

namespace meshtrain {

/// \brief Initializes Kokkos with a device id (ignored by host backends) and a thread
/// count (-1 = Kokkos default: OMP_NUM_THREADS or all cores).
void kokkos_initialize(int device_id, int num_threads);

/// "OpenMP", "Serial", "Cuda" — the default execution space.
std::string kokkos_backend_name();
/// "3.4.1", "4.6.1".
std::string kokkos_version_string();
/// Number of visible devices for the default execution space (0 on host-only builds, and
/// on device builds where the driver reports none; `why` then says why).
int kokkos_visible_devices(std::string* why = nullptr);

namespace math {
template <class T> KOKKOS_INLINE_FUNCTION T exp(T x) { return MESHTRAIN_KOKKOS_MATH_NS::exp(x); }
template <class T> KOKKOS_INLINE_FUNCTION T log(T x) { return MESHTRAIN_KOKKOS_MATH_NS::log(x); }
template <class T> KOKKOS_INLINE_FUNCTION T log1p(T x) { return MESHTRAIN_KOKKOS_MATH_NS::log1p(x); }
template <class T> KOKKOS_INLINE_FUNCTION T sqrt(T x) { return MESHTRAIN_KOKKOS_MATH_NS::sqrt(x); }
template <class T> KOKKOS_INLINE_FUNCTION T tanh(T x) { return MESHTRAIN_KOKKOS_MATH_NS::tanh(x); }
template <class T> KOKKOS_INLINE_FUNCTION T cos(T x) { return MESHTRAIN_KOKKOS_MATH_NS::cos(x); }
template <class T> KOKKOS_INLINE_FUNCTION T sin(T x) { return MESHTRAIN_KOKKOS_MATH_NS::sin(x); }
template <class T> KOKKOS_INLINE_FUNCTION T pow(T x, T y) { return MESHTRAIN_KOKKOS_MATH_NS::pow(x, y); }
template <class T> KOKKOS_INLINE_FUNCTION T fabs(T x) { return MESHTRAIN_KOKKOS_MATH_NS::fabs(x); }
template <class T> KOKKOS_INLINE_FUNCTION bool isfinite(T x) { return MESHTRAIN_KOKKOS_MATH_NS::isfinite(x); }
/// +infinity of T (Kokkos numeric traits: same spelling in 3.4 and 4.x).
template <class T> KOKKOS_INLINE_FUNCTION T infinity() { return Kokkos::Experimental::infinity<T>::value; }
template <class T> KOKKOS_INLINE_FUNCTION T max(T a, T b) { return a > b ? a : b; }
template <class T> KOKKOS_INLINE_FUNCTION T min(T a, T b) { return a < b ? a : b; }
}  // namespace math

}  // namespace meshtrain
