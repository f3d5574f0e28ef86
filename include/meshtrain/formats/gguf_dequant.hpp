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

/// The first of `n_blocks` consecutive blocks of `type` at `blocks` that holds a NaN or an
/// infinity -- in a scale (f16 d, dmin or m) or, for F32, F16 and BF16, in the value -- or
/// -1. Blocks whose scales are finite dequantize to finite values, so this is the check of a
/// base kept in its blocks (model.base_quant=gguf) that a dequantized one gets per value.
/// Precondition: gguf_can_dequantize(type).
std::int64_t gguf_first_nonfinite_block(GgmlType type, const std::byte* blocks, std::int64_t n_blocks);

}  // namespace meshtrain::formats
