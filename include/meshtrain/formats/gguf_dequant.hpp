#pragma once
/// \brief ggml tensor data -> float32, exactly as the format's reference
/// (`gguf.quants.dequantize` of the PyPI `gguf` package, i.e. ggml's dequantize_row_*):
/// every product and sum is one float32 operation in the reference's order, compiled
/// without FMA contraction, so the results are bitwise equal.
///
/// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K.

#include <cstddef>
#include <cstdint>

#include "formats/gguf_file.hpp"

namespace meshtrain::formats {

/// True for the types gguf_dequantize handles.
bool gguf_can_dequantize(GgmlType type);

/// Elements [first, first + n) of a row of `type` whose data starts at `row` (a row is
/// whole blocks: its first element starts a block) into out[0, n). Only the blocks that
/// overlap the range are decoded. Precondition: gguf_can_dequantize(type).
void gguf_dequantize(GgmlType type, const std::byte* row, std::int64_t first, std::int64_t n, float* out);

}  // namespace meshtrain::formats
