#pragma once
/// \brief bfloat16 storage type usable in host and device code. Arithmetic is done by
/// converting to float; conversion from float rounds to nearest even (NaN stays NaN).
/// Same bit layout as `__nv_bfloat16`, so buffers can be handed to cuBLAS/NCCL.

#include <cstdint>
#include <cstring>

#include <Kokkos_Core.hpp>

namespace meshtrain {

struct bf16 {
  std::uint16_t bits;

  bf16() = default;
  KOKKOS_INLINE_FUNCTION explicit bf16(float f) : bits(from_float(f)) {}
  KOKKOS_INLINE_FUNCTION explicit operator float() const { return to_float(bits); }

  KOKKOS_INLINE_FUNCTION static std::uint16_t from_float(float f) {
    std::uint32_t u;
    memcpy_device(&u, &f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0u) {
      return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    }
    const std::uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>((u + rounding_bias) >> 16);
  }
  KOKKOS_INLINE_FUNCTION static float to_float(std::uint16_t b) {
    std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
    float f;
    memcpy_device(&f, &u);
    return f;
  }

 private:
  template <class D, class S>
  KOKKOS_INLINE_FUNCTION static void memcpy_device(D* dst, const S* src) {
    static_assert(sizeof(D) == sizeof(S), "bit cast of different sizes");
    const char* s = reinterpret_cast<const char*>(src);
    char* d = reinterpret_cast<char*>(dst);
    for (unsigned i = 0; i < sizeof(D); ++i) d[i] = s[i];
  }
};
static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes");

/// Converts any supported scalar (float, double, bf16) to float / from float.
KOKKOS_INLINE_FUNCTION float to_float(float x) { return x; }
KOKKOS_INLINE_FUNCTION float to_float(double x) { return static_cast<float>(x); }
KOKKOS_INLINE_FUNCTION float to_float(bf16 x) { return static_cast<float>(x); }

/// \brief Accumulator type for a storage scalar: double stays double (gradient checks),
/// float and bf16 accumulate in float.
template <class T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
template <class T> using acc_t = typename Acc<T>::type;

/// Loads a storage scalar as its accumulator type, and stores back with rounding.
template <class T>
KOKKOS_INLINE_FUNCTION acc_t<T> load(T x) { return static_cast<acc_t<T>>(x); }
template <>
KOKKOS_INLINE_FUNCTION float load<bf16>(bf16 x) { return static_cast<float>(x); }
template <class T>
KOKKOS_INLINE_FUNCTION T store(acc_t<T> x) { return static_cast<T>(x); }
template <>
KOKKOS_INLINE_FUNCTION bf16 store<bf16>(float x) { return bf16(x); }

}  // namespace meshtrain
