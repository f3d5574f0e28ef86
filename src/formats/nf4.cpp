#include "formats/nf4.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace meshtrain::formats::nf4 {

const float kCodes[16] = {-1.0f,
                          -0.6961928009986877f,
                          -0.5250730514526367f,
                          -0.39491748809814453f,
                          -0.28444138169288635f,
                          -0.18477343022823334f,
                          -0.09105003625154495f,
                          0.0f,
                          0.07958029955625534f,
                          0.16093020141124725f,
                          0.24611230194568634f,
                          0.33791524171829224f,
                          0.44070982933044434f,
                          0.5626170039176941f,
                          0.7229568362236023f,
                          1.0f};

const float kThresholds[15] = {-0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f,
                               -0.33967943489551544f, -0.23460740596055984f, -0.13791173323988914f,
                               -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,
                               0.2035212516784668f,   0.2920137718319893f,   0.3893125355243683f,
                               0.5016634166240692f,   0.6427869200706482f,   0.8614784181118011f};

std::uint8_t code_of(float x) {
  // The count of thresholds strictly below x: bitsandbytes' tree of `x > t` tests, flat.
  std::uint8_t c = 0;
  for (const float t : kThresholds) c += x > t ? 1 : 0;
  return c;
}

Quantized quantize(const float* x, std::int64_t n) {
  MESHTRAIN_REQUIRE(n >= 0 && n % kBlock == 0, "NF4: %lld weights is not a multiple of the %d-weight block",
                    static_cast<long long>(n), kBlock);
  Quantized q;
  q.n = n;
  const std::int64_t blocks = n / kBlock;
  q.codes.assign(static_cast<std::size_t>(n / 2), 0);
  q.scales.assign(static_cast<std::size_t>(blocks), 0);
  q.scale_max.assign(static_cast<std::size_t>((blocks + kScaleGroup - 1) / kScaleGroup), 0.0f);
  std::vector<float> absmax(static_cast<std::size_t>(blocks), 0.0f);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const float* v = x + b * kBlock;
    float m = 0.0f;
    for (int i = 0; i < kBlock; ++i) m = std::max(m, std::fabs(v[i]));
    MESHTRAIN_REQUIRE(std::isfinite(m), "NF4: a non-finite weight in block %lld", static_cast<long long>(b));
    absmax[static_cast<std::size_t>(b)] = m;
    const float inv = m > 0.0f ? 1.0f / m : 0.0f;
    for (int i = 0; i < kBlock; i += 2) {
      const std::uint8_t hi = code_of(v[i] * inv), lo = code_of(v[i + 1] * inv);
      q.codes[static_cast<std::size_t>((b * kBlock + i) / 2)] = static_cast<std::uint8_t>(hi << 4 | lo);
    }
  }
  for (std::size_t g = 0; g < q.scale_max.size(); ++g) {
    const std::size_t b0 = g * kScaleGroup, b1 = std::min(absmax.size(), b0 + kScaleGroup);
    const float top = *std::max_element(absmax.begin() + static_cast<std::ptrdiff_t>(b0),
                                        absmax.begin() + static_cast<std::ptrdiff_t>(b1));
    q.scale_max[g] = top;
    const float per = top > 0.0f ? 255.0f / top : 0.0f;
    for (std::size_t b = b0; b < b1; ++b) {
      const float r = std::nearbyint(absmax[b] * per);  // round half to even (the default mode)
      const float c = absmax[b] > 0.0f ? std::clamp(r, 1.0f, 255.0f) : 0.0f;
      q.scales[b] = static_cast<std::uint8_t>(c);
    }
  }
  return q;
}

float block_scale(const Quantized& q, std::int64_t b) {
  const float top = q.scale_max[static_cast<std::size_t>(b / kScaleGroup)];
  return static_cast<float>(q.scales[static_cast<std::size_t>(b)]) * (top / 255.0f);
}

void dequantize(const Quantized& q, std::int64_t begin, std::int64_t count, float* out) {
  MESHTRAIN_REQUIRE(begin >= 0 && count >= 0 && begin + count <= q.n, "NF4: range [%lld, %lld) outside %lld weights",
                    static_cast<long long>(begin), static_cast<long long>(begin + count), static_cast<long long>(q.n));
  for (std::int64_t j = begin; j < begin + count; ++j) {
    const std::uint8_t byte = q.codes[static_cast<std::size_t>(j / 2)];
    const std::uint8_t code = j % 2 == 0 ? byte >> 4 : byte & 0x0F;
    out[j - begin] = kCodes[code] * block_scale(q, j / kBlock);
  }
}

}  // namespace meshtrain::formats::nf4
