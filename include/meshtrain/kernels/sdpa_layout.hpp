#pragma once
/// \brief How meshtrain's attention operands are described to a fused scaled-dot-product
/// attention kernel (cuDNN's SDPA graph, kernels/cudnn_attention.hpp): each operand as a 4-D
/// tensor in (batch, head, sequence, head-dim) order ("BHSD") with strides over the row-major
/// token buffers the blocks already hold, and the element offset of the first head this rank
/// uses. Q, K and V are read in place from the `qkv` buffer (row stride ld, head h at column
/// h * hd), so no transpose or copy is needed.
///
/// Grouped-query heads: the fused kernel maps query head h of the graph to kv head
/// h / (graph query heads / graph kv heads). meshtrain's map (kernels/attention.hpp) is
/// (q_head_offset + h) / group - kv_head_offset; sdpa_layout checks that the local query heads
/// read a contiguous run of kv heads in exactly the fused kernel's pattern (true for MHA, GQA,
/// and GQA under tensor parallelism with split or replicated kv heads whenever each rank's
/// query heads cover whole groups or lie inside one), and says why not otherwise.
///
/// Pure arithmetic, no CUDA: the CPU suite checks it by running a double-precision attention
/// that reads and writes every operand through these dims and strides (test_sdpa_layout).

#include <array>
#include <cstdint>
#include <string>

#include "kernels/attention.hpp"

namespace meshtrain::kernels {

/// One operand: element (b, h, s, d) is at offset + b*stride[0] + h*stride[1] + s*stride[2] + d*stride[3].
struct SdpaTensor {
  std::array<std::int64_t, 4> dim{};
  std::array<std::int64_t, 4> stride{};
  std::int64_t offset = 0;  ///< elements from the pointer passed for this operand
};

struct SdpaLayout {
  bool supported = false;
  std::string why_not;  ///< when !supported: the reason, for the log
  SdpaTensor q, k, v;   ///< dq, dk, dv are laid out like q, k, v
  SdpaTensor o;         ///< out and dout (the same row stride)
  /// Per query row the log-sum-exp of its scaled scores (fp32), in the first element of
  /// attention_forward's (B, Hq, T, 2) statistics pairs.
  SdpaTensor stats;
  int kv_heads = 0;     ///< kv heads the graph reads (k and v dim[1])
  /// True when k/v hold kv heads the local query heads do not read (replicated kv heads
  /// under tensor parallelism): their gradients are zeroed, as the Kokkos path leaves them.
  bool unread_kv_heads = false;
  /// Packed rows (kernels/sdpa_ragged.hpp): dim[0] of every operand is the graph's batch of
  /// documents and each document's first element is at the operand's offset plus its ragged
  /// offset (stride[0] is then unused); the stats are token-major (see sdpa_ragged).
  bool ragged = false;
  /// With `ragged`: the tokens (B*T) the documents cover, which bounds cuDNN's workspace.
  std::int64_t ragged_tokens = 0;
};

/// Largest head dimension the fused path takes (cuDNN's flash attention on sm_90).
inline constexpr int kSdpaMaxHeadDim = 128;

/// The layout of q (B*T, ldq), k (B*T, ldk), v (B*T, ldv) and out/dout (B*T, ldo) for shape s.
/// Not supported: document masks (packed rows; sdpa_ragged describes those), a head dimension
/// that is not a multiple of 8 or above kSdpaMaxHeadDim, row strides that are not multiples of
/// 8 elements (16-byte alignment of bf16 rows), or a head mapping the fused kernel cannot express.
SdpaLayout sdpa_layout(const AttentionShape& s, int ldq, int ldk, int ldv, int ldo);

}  // namespace meshtrain::kernels
