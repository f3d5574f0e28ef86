#include "meshtrain/model/init.hpp"

#include <algorithm>
#include <cmath>

namespace meshtrain::model {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t hash_name(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

double uniform01(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

}  // namespace

float initial_value(const ParamSpec& p, std::int64_t row, std::int64_t col, std::uint64_t seed) {
  switch (p.init) {
    case InitKind::Ones: return 1.0f;
    case InitKind::Zeros: return 0.0f;
    case InitKind::Normal:
    case InitKind::Uniform: break;
  }
  const std::uint64_t index = static_cast<std::uint64_t>(row * p.cols() + col);
  const std::uint64_t key = splitmix64(seed ^ hash_name(p.name));
  const double u1 = uniform01(splitmix64(key + 2 * index));
  const double u2 = uniform01(splitmix64(key + 2 * index + 1));
  if (p.init == InitKind::Uniform) return static_cast<float>((2.0 * u1 - 1.0) * p.init_std);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);  // Box-Muller
  return static_cast<float>(z * p.init_std);
}

void init_unit_range(const std::vector<ParamSpec>& specs, const UnitLayout& layout, int tp, int tp_rank,
                     std::int64_t begin, std::int64_t end, std::uint64_t seed, float* out) {
  std::fill(out, out + (end - begin), 0.0f);
  for_each_global_run(specs, layout, tp, tp_rank, begin, end,
                      [&](const ParamSlot& slot, std::int64_t pos, std::int64_t row, std::int64_t col0,
                          std::int64_t n) {
                        const ParamSpec& p = specs[slot.spec];
                        for (std::int64_t c = 0; c < n; ++c) out[pos + c] = initial_value(p, row, col0 + c, seed);
                      });
}

}  // namespace meshtrain::model
