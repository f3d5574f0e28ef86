#pragma once
/// \brief Block-wise absmax int8: the `model.base_quant=int8` storage of a frozen base
/// (issue 32), the 8-bit sibling of formats/nf4.
///
/// Layout of n weights (n a multiple of kBlock):
///   codes   n signed bytes, one per weight, in [-127, 127];
///   absmax  one float32 per kBlock weights: the block's largest |x|.
/// Weight j dequantizes to code_j * (absmax(block of j) / 127) in float32. Quantize:
/// code = round-half-even(x * (127 / absmax)), 0 for a block of zeros. No second-level
/// quantization: the scale costs 32 bits per 64 weights, 8.5 bits per weight in all.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace meshtrain::formats::int8_blocks {

inline constexpr int kBlock = 64;  ///< weights per absmax (the same block as NF4's)

struct Quantized {
  std::int64_t n = 0;
  std::vector<std::int8_t> codes;  ///< n
  std::vector<float> absmax;       ///< n / kBlock
  std::size_t bytes() const { return codes.size() + absmax.size() * sizeof(float); }
};

/// The code of weight x in a block of largest magnitude `absmax` (> 0).
std::int8_t code_of(float x, float absmax);
/// `n` must be a multiple of kBlock (UserError otherwise); the input must be finite.
Quantized quantize(const float* x, std::int64_t n);
/// Dequantized weights [begin, begin + count) into out.
void dequantize(const Quantized& q, std::int64_t begin, std::int64_t count, float* out);

}  // namespace meshtrain::formats::int8_blocks
