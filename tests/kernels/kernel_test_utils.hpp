#pragma once
/// \brief Helpers shared by the kernel tests: typed host<->device copies, finite-difference
/// gradient checks in double, bf16 comparisons, bitwise equality.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "core/memory.hpp"
#include "launched_kernels.hpp"
#include "test_support.hpp"

namespace meshtrain::test {

/// Host value of a storage scalar as double.
inline double as_double(float x) { return x; }
inline double as_double(double x) { return x; }
inline double as_double(bf16 x) { return static_cast<float>(x); }

/// Converts host doubles to a storage type (bf16 rounds through float).
template <class T>
std::vector<T> convert(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, bf16>) {
      out[i] = bf16(static_cast<float>(v[i]));
    } else {
      out[i] = static_cast<T>(v[i]);
    }
  }
  return out;
}
template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = as_double(v[i]);
  return out;
}

/// Values exactly representable in bf16 (so float and bf16 runs see the same inputs).
inline std::vector<double> bf16_exact(std::vector<double> v) {
  for (auto& x : v) x = static_cast<float>(bf16(static_cast<float>(x)));
  return v;
}

/// Device copy of host doubles in type T.
template <class T>
Buffer<T> upload(const std::vector<double>& v) {
  return to_device(convert<T>(v));
}
/// Device buffer back as doubles.
template <class T>
std::vector<double> download(const Buffer<T>& b) {
  return to_double(to_host(b));
}

/// sum_i w[i] * y[i]
inline double weighted_sum(const std::vector<double>& w, const std::vector<double>& y) {
  double s = 0;
  for (std::size_t i = 0; i < w.size(); ++i) s += w[i] * y[i];
  return s;
}

/// `count` distinct random indices in [0, n) (all of them when n <= count).
inline std::vector<std::size_t> sample_indices(std::size_t n, std::size_t count, std::uint64_t seed) {
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  if (n <= count) return idx;
  std::mt19937_64 gen(seed);
  std::shuffle(idx.begin(), idx.end(), gen);
  idx.resize(count);
  return idx;
}

/// \brief Central finite differences of loss() w.r.t. the entries of x at `count` random
/// indices, against the analytic gradient `grad` (same layout as x).
///
/// Tolerance: relative error < 1e-6 with a floor of 1e-2 on the denominator. In double,
/// with h = 1e-5 the truncation error is O(h^2) ~ 1e-10 and the rounding error is
/// ~ eps |L| / h ~ 1e-9 for the |L| ~ 10..100 of these tests, so a correct gradient is
/// 100x inside the bound, while any formula error (a missing term, a wrong index) is
/// orders of magnitude outside it. The floor keeps near-zero gradients from turning the
/// absolute noise into a large relative error.
inline void fd_check(const std::string& what, std::vector<double>& x, const std::vector<double>& grad,
                     const std::function<double()>& loss, std::size_t count, std::uint64_t seed,
                     double h = 1e-5) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  for (std::size_t i : sample_indices(x.size(), count, seed)) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    EXPECT_LT(rel_err(grad[i], fd, 1e-2), 1e-6)
        << what << "[" << i << "]: analytic " << grad[i] << " vs finite difference " << fd;
  }
}

/// \brief bf16 result vs the float result of the same (bf16-exact) inputs.
///
/// Tolerances: elementwise |a - r| <= rtol (|r| + rms(r)) and normwise
/// ||a - r|| <= 1e-2 ||r||. bf16 keeps 8 significant bits (one rounding = 2^-9 ~ 2e-3
/// relative); a kernel rounds its output and sometimes a few intermediates, which stays
/// within rtol = 1e-2. The rms term covers elements that are small differences of larger
/// terms, where a relative error is meaningless.
inline void expect_bf16_close(const std::string& what, const std::vector<double>& actual,
                              const std::vector<double>& ref, double rtol = 1e-2) {
  ASSERT_EQ(actual.size(), ref.size()) << what;
  double ss = 0, se = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    ss += ref[i] * ref[i];
    se += (actual[i] - ref[i]) * (actual[i] - ref[i]);
  }
  const double rms = ref.empty() ? 0.0 : std::sqrt(ss / static_cast<double>(ref.size()));
  EXPECT_LE(std::sqrt(se), 1e-2 * std::sqrt(ss)) << what << ": normwise relative error";
  int bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double tol = rtol * (std::fabs(ref[i]) + rms);
    if (!(std::fabs(actual[i] - ref[i]) <= tol)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: bf16 " << actual[i] << " vs float " << ref[i]
                      << " (tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " elements out of tolerance";
}

/// Elementwise |a - r| <= rtol * max(|r|, floor), reporting the first failures.
inline void expect_close(const std::string& what, const std::vector<double>& actual,
                         const std::vector<double>& ref, double rtol, double floor) {
  ASSERT_EQ(actual.size(), ref.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!(rel_err(actual[i], ref[i], floor) <= rtol)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: " << actual[i] << " vs reference " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " elements out of tolerance";
}

/// \brief A host array whose first element starts on 64 bytes, as the packed row functions
/// (16-byte loads) need when tests call them on the host.
template <class T>
class AlignedHost {
 public:
  explicit AlignedHost(std::size_t n) : store_(n + 64 / sizeof(T) + 1), n_(n) {
    const auto addr = reinterpret_cast<std::uintptr_t>(store_.data());
    first_ = ((64 - addr % 64) % 64) / sizeof(T);
  }
  explicit AlignedHost(const std::vector<T>& v) : AlignedHost(v.size()) {
    std::copy(v.begin(), v.end(), data());
  }
  T* data() { return store_.data() + first_; }
  const T* data() const { return store_.data() + first_; }
  std::size_t size() const { return n_; }
  std::vector<T> vec() const { return std::vector<T>(data(), data() + n_); }

 private:
  std::vector<T> store_;
  std::size_t n_, first_ = 0;
};

/// Bitwise equality of two host arrays.
template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace meshtrain::test
