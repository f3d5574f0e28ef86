#include "formats/int8_blocks.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace meshtrain::formats::int8_blocks {

std::int8_t code_of(float x, float absmax) {
  const float r = std::nearbyint(x * (127.0f / absmax));  // round half to even (the default mode)
  return static_cast<std::int8_t>(std::clamp(r, -127.0f, 127.0f));
}

Quantized quantize(const float* x, std::int64_t n) {
  MESHTRAIN_REQUIRE(n >= 0 && n % kBlock == 0, "int8: %lld weights is not a multiple of the %d-weight block",
                    static_cast<long long>(n), kBlock);
  Quantized q;
  q.n = n;
  q.codes.assign(static_cast<std::size_t>(n), 0);
  q.absmax.assign(static_cast<std::size_t>(n / kBlock), 0.0f);
  for (std::int64_t b = 0; b < n / kBlock; ++b) {
    const float* v = x + b * kBlock;
    float m = 0.0f;
    for (int i = 0; i < kBlock; ++i) m = std::max(m, std::fabs(v[i]));
    MESHTRAIN_REQUIRE(std::isfinite(m), "int8: a non-finite weight in block %lld", static_cast<long long>(b));
    q.absmax[static_cast<std::size_t>(b)] = m;
    if (m == 0.0f) continue;
    for (int i = 0; i < kBlock; ++i) q.codes[static_cast<std::size_t>(b * kBlock + i)] = code_of(v[i], m);
  }
  return q;
}

void dequantize(const Quantized& q, std::int64_t begin, std::int64_t count, float* out) {
  MESHTRAIN_REQUIRE(begin >= 0 && count >= 0 && begin + count <= q.n, "int8: range [%lld, %lld) outside %lld weights",
                    static_cast<long long>(begin), static_cast<long long>(begin + count), static_cast<long long>(q.n));
  for (std::int64_t j = begin; j < begin + count; ++j)
    out[j - begin] = static_cast<float>(q.codes[static_cast<std::size_t>(j)]) *
                     (q.absmax[static_cast<std::size_t>(j / kBlock)] / 127.0f);
}

}  // namespace meshtrain::formats::int8_blocks
