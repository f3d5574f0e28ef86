#pragma once
/// \brief The 16-bit floating formats of model files, widened to float32 exactly: IEEE
/// binary16 (safetensors F16, ggml F16 and the block scales of the quantised types) and
/// bfloat16 (safetensors BF16, ggml BF16). The compute type bf16 and its rounding
/// conversion from float live in core/bf16.hpp; bf16_bits_to_float is its widening.

#include <cstdint>

#include "core/bf16.hpp"

namespace meshtrain::formats {

/// IEEE half -> float (exact; subnormals, infinities and NaN included).
float half_to_float(std::uint16_t h);

/// bfloat16 bits -> float (exact: they are the upper 16 bits of a float32).
inline float bf16_bits_to_float(std::uint16_t b) { return bf16::to_float(b); }

}  // namespace meshtrain::formats
