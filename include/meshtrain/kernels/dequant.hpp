#pragma once
/// \brief Dequantization of a quantized frozen base (model.base_quant, issue 32) into the
/// compute dtype: the all-gathered NF4 or int8 payload of one FSDP unit's frozen segment
/// becomes the T values the blocks read, just before the unit's forward/backward -- the
/// whole segment (a block unit), or only the parts a computation reads (the outer unit,
/// kept quantized for the step: the embedding rows a micro-batch looks up, one chunk of the
/// LM head at a time).
///
/// The segment (numel elements, a multiple of 64) is `numel / shard_numel` shards laid end
/// to end; shard s's payload starts at byte s * payload_stride of `payload`:
///   nf4:  codes (shard_numel / 2 bytes, two weights a byte, the first in the high nibble)
///         | scales (shard_numel / 64 bytes, one 8-bit absmax code a block);
///   int8: codes (shard_numel signed bytes) | absmax (shard_numel / 64 float32).
/// 64-element blocks of the segment map to blocks of global tensors through `runs`
/// (sorted by local_block, disjoint); blocks outside every run (padding, and the 1-D
/// parameters kept in T) come out as 0. An NF4 block's scale is
/// scale * (group_max[run.group_base + global_block / 256] / 255), as formats::nf4.
/// Every function here evaluates each weight by the same expression as the codecs
/// (formats::nf4::dequantize, formats::int8_blocks::dequantize): code value times the
/// block's stored scale in float, then one rounding to T. So a weight has the same bits
/// whichever function reads it.

#include <cstdint>

#include "core/bf16.hpp"
#include "kernels/dequant_gguf.hpp"

namespace meshtrain::kernels {

/// Consecutive 64-element blocks [local_block, local_block + n_blocks) of a unit's frozen
/// segment that are the consecutive blocks global_block, global_block + 1, ... of one global
/// tensor (row-major); that tensor's group maxima start at group_base in the unit's table.
struct QuantRun {
  std::int64_t local_block = 0;
  std::int64_t n_blocks = 0;
  std::int64_t global_block = 0;
  std::int64_t group_base = 0;
};

/// How a quantized frozen segment is stored (model.base_quant).
enum class QuantFormat : std::uint8_t {
  Nf4,   ///< the NF4 payload above
  Int8,  ///< the int8 payload above
  Gguf,  ///< a GGUF base's own blocks (kernels/dequant_gguf.hpp): payload and gguf_runs only
};

/// A quantized frozen segment as the kernels read it (every pointer on the device).
struct QuantSegment {
  QuantFormat format = QuantFormat::Nf4;
  const std::uint8_t* payload = nullptr;   ///< every shard's payload, shard s at s * payload_stride
  std::int64_t payload_stride = 0;         ///< unused for gguf (its runs' byte offsets hold it)
  std::int64_t shard_numel = 0;            ///< weights per shard (a multiple of 64); unused for gguf
  const QuantRun* runs = nullptr;          ///< nf4, int8
  int n_runs = 0;                          ///< entries of runs, or of gguf_runs
  const float* group_max = nullptr;        ///< NF4's group maxima (the unit's table); unused otherwise
  const GgufRun* gguf_runs = nullptr;      ///< gguf: the segment's runs of file blocks and zeros
};

/// out (numel) = the NF4 segment; runs (n_runs) and group_max are device pointers.
template <class T>
void dequantize_nf4(const std::uint8_t* payload, std::int64_t payload_stride, std::int64_t shard_numel,
                    const QuantRun* runs, int n_runs, const float* group_max, T* out, std::int64_t numel);

/// out (numel) = the int8 segment; runs (n_runs) is a device pointer.
template <class T>
void dequantize_int8(const std::uint8_t* payload, std::int64_t payload_stride, std::int64_t shard_numel,
                     const QuantRun* runs, int n_runs, T* out, std::int64_t numel);

/// out (rows, cols), row stride ld_out = the rectangle [row0, row0 + rows) x [col0, col0 + cols)
/// of the row-major matrix of `row_len` columns at element `offset` of segment q,
/// dequantized: rows of it (the LM head's vocabulary chunks) or columns of it (the chunks
/// of its input-gradient GEMM), without the rest ever existing in T. Every format (gguf:
/// kernels::dequantize_gguf_rect).
template <class T>
void dequantize_rect(const QuantSegment& q, std::int64_t offset, std::int64_t row_len, std::int64_t row0,
                     std::int64_t rows, std::int64_t col0, std::int64_t cols, T* out, std::int64_t ld_out);

/// The embedding lookup of a quantized table: out (n, row_len) row i = row
/// index[i] - row_start of the (row_count, row_len) matrix at element `offset` of q,
/// dequantized, or zeros when index[i] is outside [row_start, row_start + row_count) (a
/// token of another tp rank's vocabulary slice) -- kernels::embedding_forward of the
/// dequantized table, reading only the rows looked up. index: (n) device int32. Every
/// format (gguf: kernels::dequantize_gguf_gather_rows).
template <class T>
void dequantize_gather_rows(const QuantSegment& q, std::int64_t offset, std::int64_t row_len,
                            const std::int32_t* index, int n, std::int64_t row_start, std::int64_t row_count,
                            T* out);

}  // namespace meshtrain::kernels
