#pragma once
/// \brief Packed rows (document masks, AttentionShape::doc_start) described to cuDNN's
/// variable-length ("ragged", THD) scaled-dot-product attention: a (B, T) batch whose rows
/// hold several documents is, for cuDNN, a batch of documents, each one sequence whose
/// tokens are contiguous in the (B*T, ld) q/k/v/out buffers.
///
/// The fused kernel then applies, per graph batch entry e with seq_len[e] tokens starting at
/// element offset[e] of each operand: query i (i < seq_len[e]) attends to keys j with j <= i
/// (the causal mask, top-left diagonal) and j < seq_len[e] (the padding mask) — exactly
/// "keys [doc_start(i), i]" of the Kokkos path, since a document's queries and keys are the
/// same tokens. Rows i >= seq_len[e] are neither read nor written.
///
/// Graph batch: the number of documents changes every step, and a cuDNN graph fixes its
/// dims. The batch is the document count rounded up to a power of two (sdpa_ragged_batch),
/// the entries past the last document have length 0, and their offsets point at the end of
/// the buffers, so the ragged offsets stay the non-decreasing prefix sums the frontend's THD
/// tests use. The frontend's own randomized SDPA tests (test/python/sdpa/random_config.py)
/// give padded and ragged batches zero-length query sequences; their key lengths are >= 1
/// there, ours 0 too, so that no key row of an unused entry aliases a real token (a backward
/// that wrote dK/dV = 0 over it would clobber that token's gradient). selfcheck_paths'
/// attention.cudnn_ragged uses a document count that leaves unused entries. A (B, T) batch therefore needs at most log2(B*T) + 1 graphs per
/// direction and layer shape, built once each; one graph per exact count would rebuild on
/// most steps, and batch = B*T would launch B*T mostly empty sequences every call. A
/// training step replayed from a CUDA graph fixes the batch for all its micro-steps
/// (AttentionShape::ragged_batch: the largest micro-step's, agreed over the ranks), and one
/// captured step serves every later step with that batch (train/step_graph.hpp).
///
/// Ragged offsets count elements (the frontend's tests: prefix sum of seq_len times the
/// token's element stride, H*D for packed THD): here token index * ld for q, k, v and out
/// (the qkv buffer's row stride), int64 as in those tests. The statistics (log-sum-exp,
/// fp32) are ragged too, token-major: (token, head) at token * Hq + head of the caller's
/// (B, Hq, T, 2) statistics buffer (its first B*T*Hq floats; forward and backward of one shape
/// always take the same path, so the layout is private to it).
///
/// Pure arithmetic, no CUDA: the CPU suite runs a double-precision attention that reads and
/// writes only through this description against the Kokkos path (test_sdpa_ragged). The
/// device copy of the index is computed on the device from the uploaded document starts
/// (sdpa_ragged_index, a Kokkos kernel whose host twin is index_block()).

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/sdpa_layout.hpp"

namespace meshtrain::kernels {

/// The operands with ragged offsets, in the order of SdpaRagged::offsets. dq, dk, dv use
/// q's, k's and v's; dout uses out's.
enum SdpaOperand : int { kRaggedQ = 0, kRaggedK, kRaggedV, kRaggedO, kRaggedStats, kRaggedOperands };

/// The per-call part of the description (host values; the caller uploads index_block()).
struct SdpaRagged {
  int documents = 0;  ///< documents of the batch (graph batch entries in use)
  int batch = 0;      ///< graph batch: sdpa_ragged_batch(documents)
  /// (batch) tokens of each document, in row order; 0 for the unused entries. cuDNN's
  /// seq_len_q and seq_len_kv (a document's queries are its keys).
  std::vector<std::int32_t> seq_len;
  /// (kRaggedOperands, batch + 1) element offsets: document e of operand op starts at
  /// offsets[op * (batch + 1) + e]; entry `batch` (and the unused ones) is the end.
  std::vector<std::int64_t> offsets;

  const std::int64_t* offset(SdpaOperand op) const { return offsets.data() + op * (batch + 1); }
  /// The device image: array a (the offsets of operand a for a < kRaggedOperands, then
  /// seq_len as int32) at int64 element a * sdpa_ragged_index_stride(batch), so that every
  /// array cuDNN reads starts 256-byte aligned, as a separately allocated tensor would.
  std::vector<std::int64_t> index_block() const;
};

/// int64 elements between the arrays of the index block: batch + 1 rounded up to 32.
std::int64_t sdpa_ragged_index_stride(int batch);
/// Elements (int64) of the index block for a graph batch.
std::int64_t sdpa_ragged_index_elems(int batch);

/// Graph batch for `documents` documents: the next power of two (>= 1).
int sdpa_ragged_batch(int documents);

/// Documents of B packed rows of T tokens with host document starts `doc_start_host`
/// ((B, T), the rule of AttentionShape::doc_start): the tokens that start one. Not checked
/// (sdpa_ragged checks the starts when it describes them).
int sdpa_ragged_documents(const std::int32_t* doc_start_host, int B, int T);

struct SdpaRaggedCall {
  SdpaLayout layout;  ///< supported and ragged, or the reason it is not
  SdpaRagged ragged;
};

/// \brief The device image of SdpaRagged::index_block(), bit for bit, computed on the device
/// from the device document starts `doc_start` ((B, T), the rule of AttentionShape::doc_start)
/// for graph batch `batch` (sdpa_ragged_batch of the document count; the count itself is
/// taken from the starts): per operand the element offsets first token * `token_stride[op]`
/// (entries past the last document and entry `batch`: B*T * token_stride[op]), then the
/// per-document lengths as int32. `block`: sdpa_ragged_index_elems(batch) int64, device;
/// `first`: device scratch of batch + 1 int64. Two kernels (a scan over the B*T tokens, a
/// fill of the block) queued on the default execution space; nothing is read back and nothing
/// is copied from the host, so the call can be captured into a CUDA graph. The starts are not
/// checked here: sdpa_ragged (which the caller needs for the layout and the batch) checks
/// them on the host. Its host twin is index_block() (test_kernels_sdpa_ragged compares them).
void sdpa_ragged_index(const std::int32_t* doc_start, int B, int T, const std::int64_t* token_stride, int batch,
                       std::int64_t* block, std::int64_t* first);

/// Per-token element strides of the operands, in SdpaOperand order: ld for q, k, v and out,
/// Hq for the token-major statistics (what sdpa_ragged multiplies the first tokens by).
std::array<std::int64_t, kRaggedOperands> sdpa_ragged_token_strides(const AttentionShape& s, int ldq, int ldk,
                                                                    int ldv, int ldo);

/// The description of packed shape s (s.doc_start set) whose document starts are
/// doc_start_host ((B, T) host ints, the rule of AttentionShape::doc_start). The graph batch
/// is s.ragged_batch when set (a power of two, at least the document count: a fatal error
/// otherwise), else sdpa_ragged_batch of the count. Refused for the reasons sdpa_layout
/// refuses a dense shape, or without a host copy of the starts. Malformed starts (first of
/// a row not 0, a start that is neither the token nor its predecessor's) are a fatal error,
/// as in the Kokkos path.
SdpaRaggedCall sdpa_ragged(const AttentionShape& s, const std::int32_t* doc_start_host, int ldq, int ldk, int ldv,
                           int ldo);

}  // namespace meshtrain::kernels
