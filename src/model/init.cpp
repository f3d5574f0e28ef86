#include "model/init.hpp"

#include <algorithm>
#include <cmath>

#include <Kokkos_Core.hpp>

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

/// The random stream of parameter `p`: one key per (seed, name).
std::uint64_t param_key(const ParamSpec& p, std::uint64_t seed) { return splitmix64(seed ^ hash_name(p.name)); }

/// Element `index` (row-major logical) of `p` from its stream `key`.
float value_at(const ParamSpec& p, std::uint64_t key, std::uint64_t index) {
  switch (p.init) {
    case InitKind::Ones: return 1.0f;
    case InitKind::Zeros: return 0.0f;
    case InitKind::Normal:
    case InitKind::Uniform: break;
  }
  const double u1 = uniform01(splitmix64(key + 2 * index));
  const double u2 = uniform01(splitmix64(key + 2 * index + 1));
  if (p.init == InitKind::Uniform) return static_cast<float>((2.0 * u1 - 1.0) * p.init_std);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);  // Box-Muller
  return static_cast<float>(z * p.init_std);
}

}  // namespace

float initial_value(const ParamSpec& p, std::int64_t row, std::int64_t col, std::uint64_t seed) {
  return value_at(p, param_key(p, seed), static_cast<std::uint64_t>(row * p.cols() + col));
}

void init_unit_range(const std::vector<ParamSpec>& specs, const UnitLayout& layout, int tp, int tp_rank,
                     std::int64_t begin, std::int64_t end, std::uint64_t seed, float* out) {
  std::fill(out, out + (end - begin), 0.0f);
  // Collect the runs, then fill them on the host threads: every element is a pure function
  // of (seed, name, index), so the result does not depend on the thread count or the mesh.
  struct Run {
    const ParamSpec* p;
    std::uint64_t key;
    std::int64_t pos, index, n;
  };
  std::vector<Run> runs;
  std::vector<std::uint64_t> keys(specs.size(), 0);
  std::vector<bool> have(specs.size(), false);
  for_each_global_run(specs, layout, tp, tp_rank, begin, end,
                      [&](const ParamSlot& slot, std::int64_t pos, std::int64_t row, std::int64_t col0,
                          std::int64_t n) {
                        const ParamSpec& p = specs[slot.spec];
                        if (!have[slot.spec]) keys[slot.spec] = param_key(p, seed), have[slot.spec] = true;
                        runs.push_back(Run{&p, keys[slot.spec], pos, row * p.cols() + col0, n});
                      });
  Kokkos::parallel_for(
      "init_unit_range", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, runs.size()), [&](std::size_t i) {
        const Run& r = runs[i];
        for (std::int64_t c = 0; c < r.n; ++c)
          out[r.pos + c] = value_at(*r.p, r.key, static_cast<std::uint64_t>(r.index + c));
      });
  Kokkos::fence();
}

}  // namespace meshtrain::model
