#pragma once
/// \brief NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al. 2023), with its scales
/// double-quantized: the storage a quantized frozen base (issue 32) keeps per weight.
///
/// Layout of n weights (n a multiple of kBlock):
///   codes   n / 2 bytes: weight 2i in the high nibble of byte i, weight 2i+1 in the low
///           nibble (bitsandbytes' order); a code is an index into kCodes.
///   scales  n / kBlock bytes: each block's absmax, quantized to 8 bits (below).
///   scale_max  one float per kScaleGroup scales: the largest absmax of the group.
/// Weight j dequantizes to kCodes[code_j] * absmax'(block of j) in float32, where
///   absmax'(b) = scale_b * (scale_max(group of b) / 255).
///
/// Quantize, per block of kBlock weights: absmax = max |x| (float32); each weight's code is
/// the number of kThresholds below x * (1 / absmax) -- exactly bitsandbytes' dQuantizeNF4
/// decision tree (its thresholds are the midpoints of adjacent codes; a weight on a
/// midpoint takes the lower code); a block of zeros takes the code of 0.0.
///
/// Double quantization (what is done, not the paper's FP8): the absmax values of kScaleGroup
/// consecutive blocks share one float32 `scale_max`; each is stored as
/// round-half-even(absmax * (255 / scale_max)), at least 1 for a non-zero absmax (a block is
/// never zeroed), at most 255. Linear 8-bit over [0, scale_max] keeps neighbouring blocks'
/// scales within ~0.2-1% (they differ by a few x inside a group), where an 8-bit float would
/// give ~6%; it costs 8.5 bits per 64 weights instead of 32: 4.13 bits per weight in all.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace meshtrain::formats::nf4 {

inline constexpr int kBlock = 64;        ///< weights per absmax (QLoRA's block size)
inline constexpr int kScaleGroup = 256;  ///< absmax values per scale_max (QLoRA's second-level block)

/// The 16 NF4 values (bitsandbytes' create_normal_map, as float32), ascending.
extern const float kCodes[16];
/// The 15 decision thresholds (midpoints of adjacent kCodes in double, rounded to float32).
extern const float kThresholds[15];

/// The code of one normalised weight (x in [-1, 1]).
std::uint8_t code_of(float normalised);

struct Quantized {
  std::int64_t n = 0;
  std::vector<std::uint8_t> codes;      ///< n / 2
  std::vector<std::uint8_t> scales;     ///< n / kBlock
  std::vector<float> scale_max;         ///< ceil(n / kBlock / kScaleGroup)
  std::size_t bytes() const { return codes.size() + scales.size() + scale_max.size() * sizeof(float); }
};

/// `n` must be a multiple of kBlock (UserError otherwise); the input must be finite.
Quantized quantize(const float* x, std::int64_t n);
/// The block's absmax as stored (absmax'), block b of q.
float block_scale(const Quantized& q, std::int64_t b);
/// Dequantized weights [begin, begin + count) into out (any sub-range: an FSDP shard).
void dequantize(const Quantized& q, std::int64_t begin, std::int64_t count, float* out);

}  // namespace meshtrain::formats::nf4
