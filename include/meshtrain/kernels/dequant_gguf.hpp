#pragma once
/// \brief Dequantization of a frozen base kept in its GGUF file's own block types
/// (model.base_quant=gguf, issue 32) into the compute dtype: each element is, bit for bit,
/// what formats::gguf_dequantize (and so the `gguf` package's gguf.quants.dequantize) gives
/// for it, rounded once to T. No fused multiply-add: the host compiles this file with
/// -ffp-contract=off, and CUDA's device code uses the round-to-nearest intrinsics.
///
/// What is decoded is described by runs (parallel/gguf_base.hpp builds them): a run covers
/// `numel` consecutive elements of a unit's frozen segment from element `local`, and they
/// are whole blocks of one ggml type whose bytes lie end to end from byte `byte` of the
/// gathered payload, as the file stores them -- or, type kGgufZeroRun, elements that are 0
/// (alignment padding, vocabulary rows a file lacks). Block types: Q4_0, Q4_1, Q8_0 (32
/// weights a block), Q4_K, Q6_K (256), and F32, F16, BF16 (one weight a "block").
///
/// The work is split into groups of kGgufGroup consecutive elements of a run, each a run's
/// element offset that is a multiple of 32: a 32-weight block, one of the 8 sub-blocks of a
/// K-quant block (their scales decoded once per group), or 32 weights of a float type (the
/// last group of a run may be shorter). Runs carry the index of their first group; the
/// groups of all runs are numbered consecutively.

#include <cstdint>

#include "core/bf16.hpp"

namespace meshtrain::kernels {

/// The type of a run of zeros.
inline constexpr std::uint32_t kGgufZeroRun = 0xFFFFFFFFu;
/// Elements per group of work.
inline constexpr std::int64_t kGgufGroup = 32;

struct GgufRun {
  std::int64_t local = 0;        ///< first element of the frozen segment it covers
  std::int64_t numel = 0;        ///< elements it covers (whole blocks of its type)
  std::int64_t first_group = 0;  ///< index of its first group (groups of all runs numbered in order)
  std::int64_t byte = 0;         ///< byte of its first block in the payload
  std::uint32_t type = 0;        ///< ggml type number (formats::GgmlType), or kGgufZeroRun
};

/// True for the ggml types (file numbering) the kernel decodes.
bool gguf_kernel_type(std::uint32_t type);

/// Groups of a run of `numel` elements.
inline std::int64_t gguf_groups(std::int64_t numel) { return (numel + kGgufGroup - 1) / kGgufGroup; }

/// out[e - first] = element e of the segment for every element e in [first, last) that
/// groups [group_begin, group_end) cover. `payload` and `runs` (n_runs, sorted by
/// first_group, groups numbered consecutively) are device pointers; elements of [first,
/// last) in no group are left alone.
template <class T>
void dequantize_gguf(const std::uint8_t* payload, const GgufRun* runs, int n_runs, std::int64_t group_begin,
                     std::int64_t group_end, std::int64_t first, std::int64_t last, T* out);

/// out (rows, cols), row stride ld_out = the rectangle [row0, row0 + rows) x [col0, col0 +
/// cols) of the row-major matrix of `row_len` columns at element `offset` of the segment
/// (`payload`, `runs`: device pointers, runs sorted by element): rows of the LM head (its
/// vocabulary chunks) or columns of it (the chunks of its input-gradient GEMM), decoded
/// without the rest ever existing in T -- kernels::dequantize_rect of a gguf segment.
/// Elements in no run (1-D slots) come out as 0.
template <class T>
void dequantize_gguf_rect(const std::uint8_t* payload, const GgufRun* runs, int n_runs, std::int64_t offset,
                          std::int64_t row_len, std::int64_t row0, std::int64_t rows, std::int64_t col0,
                          std::int64_t cols, T* out, std::int64_t ld_out);

/// The embedding lookup of a table kept in GGUF blocks: out (n, row_len) row i = row
/// index[i] - row_start of the (row_count, row_len) matrix at element `offset` of the
/// segment, decoded, or zeros when index[i] is outside [row_start, row_start + row_count)
/// (another tp rank's vocabulary slice) -- kernels::dequantize_gather_rows of a gguf
/// segment. index: (n) device int32.
template <class T>
void dequantize_gguf_gather_rows(const std::uint8_t* payload, const GgufRun* runs, int n_runs, std::int64_t offset,
                                 std::int64_t row_len, const std::int32_t* index, int n, std::int64_t row_start,
                                 std::int64_t row_count, T* out);

}  // namespace meshtrain::kernels
