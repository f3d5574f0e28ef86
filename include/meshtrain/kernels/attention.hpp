#pragma once
/// \brief Causal multi-head attention with grouped-query heads, built from batched GEMMs
/// (linalg) and Kokkos softmax kernels.
///
/// Layout: activations are rows of N = B*T tokens. Query head h (local index, 0..Hq-1) is
/// columns [h*hd, (h+1)*hd) of q (row stride ldq); key/value head j likewise in k/v.
/// Query head h reads kv head  (q_head_offset + h) / group - kv_head_offset , where
/// group = (total query heads)/(total kv heads). This covers plain MHA, GQA, and GQA under
/// tensor parallelism with split (kv_head_offset = rank*Hkv) or replicated
/// (kv_head_offset = 0) kv heads.

#include <cstdint>
#include <string>

#include "core/bf16.hpp"

namespace meshtrain::kernels {

/// Which implementation computes training attention (config gpu.attention). Kokkos: the
/// blocked GEMM + softmax path below, on every backend. Cudnn: cuDNN's fused flash attention
/// (kernels/cudnn_attention.hpp) on CUDA builds with cuDNN, for the shapes sdpa_layout()
/// supports and, packed rows, sdpa_ragged() (with doc_start_host); any other shape, and
/// every host build, takes the Kokkos path.
enum class AttentionPath { Kokkos, Cudnn };

struct AttentionShape {
  int B = 1, T = 1;        ///< batch, sequence length
  int Hq = 1, Hkv = 1;     ///< local query heads, local kv heads present in k/v
  int hd = 1;              ///< head dim
  int group = 1;           ///< query heads per kv head (global)
  int q_head_offset = 0;   ///< global index of local query head 0
  int kv_head_offset = 0;  ///< global index of local kv head 0
  float scale = 1.0f;      ///< 1/sqrt(hd)
  /// Document masking (packed rows, doc/data.md): null, or (B, T) device ints where
  /// doc_start[b * T + i] is the position in row b at which query i's document starts
  /// (non-decreasing along the row; doc_start[i] <= i, and doc_start[i] == i or
  /// doc_start[i - 1]). Query i then attends only to keys [doc_start[i], i]. Training
  /// attention only; the KV-cache functions ignore it (generation is one document).
  const std::int32_t* doc_start = nullptr;
  /// The same document starts in host memory (or null): the fused path (AttentionPath::Cudnn)
  /// reads them on the host to describe the documents to cuDNN as a variable-length batch
  /// (kernels/sdpa_ragged.hpp); without them packed rows take the Kokkos path.
  const std::int32_t* doc_start_host = nullptr;
  /// The fused path's graph batch for these packed rows (kernels/sdpa_ragged.hpp): 0, the
  /// document count's own (sdpa_ragged_batch), or a larger power of two fixed by the caller
  /// so that every micro-step of a step -- and every step replayed from one CUDA graph --
  /// describes the same cuDNN graph (train/step_graph.hpp). Ignored by the Kokkos path.
  int ragged_batch = 0;
  AttentionPath path = AttentionPath::Kokkos;
};

/// \brief Work counts of the host blocked attention, for tests: one tile is one
/// (sequence, query head, query block, key block) of attention_block_rows(T) square on or
/// below the diagonal. `skipped` tiles lie wholly before the document start of their block's
/// first query (every score in them is masked out), so their GEMMs and softmax are never run.
struct AttentionTileCounts {
  std::int64_t computed = 0, skipped = 0;
};
/// Counts accumulated by attention_forward and attention_backward since the last reset
/// (each call adds its tiles; process-wide, not thread-safe: tests read it between calls).
AttentionTileCounts attention_tile_counts();
void reset_attention_tile_counts();

/// Query rows processed together: on host blocks of 128 rows (block [i0, i1) multiplies
/// only against keys [0, i1), about half the GEMM flops of the full causal square); on
/// GPUs the whole sequence (fewer, larger cuBLAS calls).
int attention_block_rows(int T);

/// Query rows whose keys this build's attention handles as one block, for counting the work
/// a document mask leaves (plan::add_document_attention_work): attention_block_rows(T) on the
/// Kokkos path; 1 where `path` is cuDNN in a build that has it and the compute dtype is bf16
/// (its variable-length form attends each query to exactly its document's earlier keys; a
/// shape it refuses falls back to the Kokkos path, which this count does not see).
int attention_work_rows(AttentionPath path, bool bf16, int T);

/// Scratch elements attention_forward and attention_backward need: two score strips of
/// (B, attention_block_rows(T), T). The (B, Hq, T, T) probabilities are never stored:
/// forward keeps each row's softmax statistics and backward recomputes one strip at a time.
std::int64_t attention_workspace_elems(const AttentionShape& s);

/// out (N, Hq*hd; ldo) = softmax(scale * q k^T + causal mask) v, per (b, h); with
/// s.doc_start also masked to the query's own document. On host builds a document-masked
/// strip multiplies each sequence only against keys [doc_start[i0], i1) of its query block
/// [i0, i1) (masked-out tiles skipped, see AttentionTileCounts); on GPUs the whole strip is
/// computed and the masked scores zeroed by the same softmax kernels.
/// stats (B, Hq, T, 2): per query row the softmax's maximum score and 1 / sum of its
/// exponentials, what backward needs to recompute the probabilities bit for bit.
/// workspace: attention_workspace_elems(s) elements of scratch.
template <class T>
void attention_forward(const AttentionShape& s, const T* q, int ldq, const T* k, int ldk,
                       const T* v, int ldv, T* out, int ldo, acc_t<T>* stats, T* workspace);

/// Gradients: dq (N, Hq*hd; ldq) overwritten; dk, dv (N, Hkv*hd; ldk/ldv) overwritten
/// (kv heads shared by several query heads accumulate their contributions in a fixed order).
/// out: forward's output (N, Hq*hd; ldo, like dout), which the fused path reads; stats:
/// forward's; workspace: attention_workspace_elems(s) elements of scratch.
template <class T>
void attention_backward(const AttentionShape& s, const T* q, int ldq, const T* k, int ldk,
                        const T* v, int ldv, const T* out, const acc_t<T>* stats, const T* dout, int ldo,
                        T* dq, T* dk, T* dv, T* workspace);

/// The fused path this build can take for training attention: "cuDNN 9.x (frontend 1.y)" on
/// CUDA builds with cuDNN, "" otherwise (every shape then takes the Kokkos path).
std::string fused_attention_version();

/// Whether training attention on `path` runs as a fused kernel of its own in this build (cuDNN
/// SDPA: bf16, gpu.attention=cudnn, a build with cuDNN); the Kokkos path is GEMMs and softmax
/// kernels (which the cost model times as the model's GEMMs, plan/measure.hpp). Shapes the
/// fused kernel refuses still fall back to the Kokkos path.
bool attention_is_fused(AttentionPath path, bool bf16);

/// Incremental decoding. A key/value cache holds, per layer, k_cache and v_cache of shape
/// (B, Hkv, T_cache, hd) (local kv heads, contiguous), positions [0, filled) valid.
/// s.T is the number of new positions Tq (the prompt at prefill, 1 per decoded token).

/// Copies the new keys k (B*Tq, ldk) and values v (B*Tq, ldv) of positions
/// pos0 .. pos0+Tq-1 into the caches.
template <class T>
void kv_cache_write(const AttentionShape& s, int pos0, int T_cache, const T* k, int ldk, const T* v, int ldv,
                    T* k_cache, T* v_cache);

/// out (B*Tq, Hq*hd; ldo) = softmax(scale * q K^T, causal) V for queries q (B*Tq; ldq) at
/// positions pos0 .. pos0+Tq-1 against cached keys/values [0, pos0+Tq): query i sees keys
/// [0, pos0+i]. With pos0 = 0 it equals attention_forward. scores: scratch of
/// B*Hq*Tq*(pos0+Tq) elements.
template <class T>
void attention_forward_cached(const AttentionShape& s, int pos0, int T_cache, const T* q, int ldq,
                              const T* k_cache, const T* v_cache, T* out, int ldo, T* scores);

}  // namespace meshtrain::kernels
