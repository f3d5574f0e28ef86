#include "test_support.hpp"

#include <algorithm>
#include <cmath>

namespace meshtrain::test {
namespace {
Runtime* g_runtime = nullptr;
}

void set_runtime(Runtime* rt) { g_runtime = rt; }
Runtime& runtime() { return *g_runtime; }
const MpiComm& world() { return g_runtime->world(); }

std::vector<double> random_normal(std::size_t n, std::uint64_t seed, double stddev) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> out(n);
  for (auto& x : out) x = dist(gen);
  return out;
}

double rel_err(double a, double b, double floor) {
  return std::fabs(a - b) / std::max({std::fabs(a), std::fabs(b), floor});
}

}  // namespace meshtrain::test
