#pragma once
/// \brief The decoder-only transformer (GPT-2 and Llama families) with explicit forward and
/// backward per layer — no autograd. A `Transformer<T>` holds no parameters: every call
/// receives the base pointer of the unit's flat TP-local parameter buffer (and of its
/// gradient buffer, same layout), so FSDP, a plain local store, or a test can own them.
///
/// T is the compute type (float, bf16; double for gradient checks). Parameter gradients are
/// acc_t<T> (fp32 for bf16 and fp32, double for double): every kernel and weight-gradient GEMM
/// that writes one accumulates into it unrounded (bf16 operands, fp32 C: linalg::gemm_acc),
/// so a gradient summed over LM-head chunks, micro-steps or several GEMMs is rounded only by
/// fp32 additions.
/// Data flow of one micro-batch (N = B*T tokens, C = d_model):
///   x0 = embed(tokens)                          (N, C)  [vocab-parallel + tp all-reduce]
///   x_{i+1} = block_i(x_i)                      (N, C)
///   loss, dx_L = head(x_L, targets)             fused forward+backward, vocab-parallel CE
///   dx_i = block_i.backward(dx_{i+1})           in place
///   embed.backward(dx_0)
/// The outer unit's parameters come as OuterParams: its buffer in T, or, with a quantized
/// base, its quantized segment, of which the embedding dequantizes the rows it looks up and
/// the head a chunk at a time (model/outer_params.hpp).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/memory.hpp"
#include "kernels/attention.hpp"
#include "model/activations.hpp"
#include "model/compute_context.hpp"
#include "model/kernel_paths.hpp"
#include "model/kv_cache.hpp"
#include "model/layout.hpp"
#include "model/outer_params.hpp"

namespace meshtrain::model {

/// Elements of the logits scratch of the fused head (rows x local vocab): 16 M on host
/// (64 MiB fp32, cache-friendly chunks), 256 M on GPUs (few, large GEMMs; 512 MiB in bf16).
inline constexpr std::int64_t kHeadChunkElements = kDeviceIsHost ? (std::int64_t{1} << 24) : (std::int64_t{1} << 28);
/// Elements of the LM head's weight dequantized at once when the outer unit is kept
/// quantized (OuterParams): 4 M on host (8 MiB in bf16), 64 M on GPUs (128 MiB). A head of
/// at most this many elements is dequantized whole, and its GEMMs are today's.
inline constexpr std::int64_t kHeadWeightChunkElements = kDeviceIsHost ? (std::int64_t{1} << 22) : (std::int64_t{1} << 26);

/// Elements of the scratch a kept-quantized LM head (vocab_local, d_model) dequantizes its
/// weight into, for a chunk budget of `budget` elements: the larger of a chunk of vocabulary
/// rows (the logits' GEMMs) and a chunk of columns (dx's); the whole head when it fits the
/// budget, more than the budget only when one row or column is larger.
std::int64_t head_weight_chunk_elements(std::int64_t vocab_local, int d_model,
                                        std::int64_t budget = kHeadWeightChunkElements);

struct BatchShape {
  int B = 1;  ///< sequences
  int T = 1;  ///< tokens per sequence
  /// Packed rows (doc/data.md): null, or (B*T) device ints, the position in its row at
  /// which each token's document starts. Attention stays within a document and positions
  /// (RoPE, learned) restart at 0 there (kernels::AttentionShape::doc_start).
  const std::int32_t* doc_start = nullptr;
  /// Host copy of doc_start (or null), for cuDNN's variable-length attention
  /// (kernels::AttentionShape::doc_start_host).
  const std::int32_t* doc_start_host = nullptr;
  /// With packed rows: 0, or the fused attention's graph batch for this micro-step
  /// (kernels::AttentionShape::ragged_batch), fixed by the step (train/step_batch.hpp).
  int ragged_batch = 0;
  /// Null, or the device copy of kernels::token_grad_index of the tokens (this tp rank's
  /// vocabulary slice): the embedding gradient's grouping of positions by row, made on the
  /// host where the tokens come from (train/step_batch.hpp), so that GPUs read nothing back.
  const std::int32_t* token_grad_index = nullptr;
  int N() const { return B * T; }
};

/// The training attention of one block of `dims` on tp rank `tp` for batch `s` (its document
/// starts included), on `path`: this rank's query heads and the kv heads they read (GPT-2's
/// kv heads are its query heads, group 1), scale 1/sqrt(head_dim). What the blocks and the
/// cost model's attention timing (plan/measure.hpp) pass to kernels::attention_*.
kernels::AttentionShape attention_shape(const ModelDims& dims, const TpDims& tp, BatchShape s,
                                        kernels::AttentionPath path);

template <class T>
class Transformer {
 public:
  /// `layouts` give parameter offsets inside each unit buffer (any shard count).
  /// `paths`: which form of the fusable kernels runs (gpu.* keys; the fused ones by default).
  Transformer(const ModelDims& dims, const TpDims& tp, const std::vector<ParamSpec>& specs,
              const std::vector<UnitLayout>& layouts, KernelPaths paths = {});

  const ModelDims& dims() const { return dims_; }
  /// The most elements of a kept-quantized LM head dequantized at once (tests make it small
  /// to cut the head into many chunks).
  void set_head_weight_chunk(std::int64_t elements) { head_weight_chunk_ = std::max<std::int64_t>(1, elements); }
  /// The most logits elements of one LM-head chunk (kHeadChunkElements; tests make it small
  /// to cut a micro-batch's rows into many chunks).
  void set_head_chunk(std::int64_t elements) { head_chunk_ = std::max<std::int64_t>(1, elements); }

  const TpDims& tp() const { return tp_; }
  const KernelPaths& paths() const { return paths_; }

  /// x (N, C) = token (+ position) embedding. tokens: device (N) int32 at positions
  /// pos0 .. pos0+T-1 of each sequence (pos0 > 0 when decoding against a KV cache).
  void embed_forward(const ComputeContext& ctx, const OuterParams<T>& outer, const std::int32_t* tokens,
                     BatchShape s, T* x, int pos0 = 0) const;
  /// Accumulates embedding gradients from dx (N, C).
  void embed_backward(const ComputeContext& ctx, acc_t<T>* outer_grad, const std::int32_t* tokens,
                      BatchShape s, const T* dx) const;

  /// Block i: x_out (N, C) = block(x_in). With `checkpoint`, the cache keeps nothing
  /// (backward recomputes from x_in).
  void block_forward(const ComputeContext& ctx, int i, const T* params, BatchShape s, const T* x_in,
                     T* x_out, BlockCache<T>& cache, bool checkpoint) const;
  /// Block i for generation: x_in (N, C) holds new positions pos0 .. pos0+T-1 (pos0 =
  /// kv.filled) of sequences whose earlier keys/values are in `kv`; their attention reads
  /// the cache, and their own keys/values are appended to layer i of it (the caller
  /// advances kv.filled once every layer has run). Forward only, nothing saved.
  void block_forward_cached(const ComputeContext& ctx, int i, const T* params, BatchShape s, const T* x_in,
                            T* x_out, KvCache<T>& kv) const;
  /// dx (N, C): gradient w.r.t. the block output on entry, w.r.t. its input on return.
  /// Parameter gradients accumulate into `grads` (unit layout). x_in is the block input
  /// (needed when the cache was checkpointed).
  void block_backward(const ComputeContext& ctx, int i, const T* params, acc_t<T>* grads, BatchShape s,
                      const T* x_in, BlockCache<T>& cache, T* dx) const;

  /// Final norm + LM head + cross-entropy, forward and backward together: returns the local
  /// sum of per-token losses (identical on every tp rank; or adds it to `loss_sum`, below),
  /// writes dx_L (N, C) (overwrite) and
  /// accumulates head/final-norm gradients. grad_scale multiplies dlogits (1/global tokens);
  /// row_scale (device, (N), or null) multiplies each row's dlogits as well (DPO: the
  /// coefficient of the row's sequence, kernels::cross_entropy_finish).
  /// `loss_sum`: null, or a device double the micro-batch's loss sum is added to (the chunk
  /// losses of gpu.fused_loss summed in chunk order on the device, the three-pass form's
  /// host sum added by a kernel): nothing is then read back and 0 is returned.
  double head_forward_backward(const ComputeContext& ctx, const OuterParams<T>& outer, acc_t<T>* outer_grad,
                               BatchShape s, const T* x, const std::int32_t* targets,
                               float grad_scale, T* dx, const float* row_scale = nullptr,
                               double* loss_sum = nullptr) const;
  /// Loss sum only (evaluation).
  double head_loss(const ComputeContext& ctx, const OuterParams<T>& outer, BatchShape s, const T* x,
                   const std::int32_t* targets) const;
  /// Forward only: each sequence's sum of log p(target) over its counted targets (targets
  /// >= 0), on the host, (B); the same on every tp rank. DPO's log-probability of a response.
  std::vector<double> head_sequence_logp(const ComputeContext& ctx, const OuterParams<T>& outer, BatchShape s,
                                         const T* x, const std::int32_t* targets) const;
  /// The same into `logp`, (B) device doubles, nothing read back (DPO's training step).
  void head_sequence_logp(const ComputeContext& ctx, const OuterParams<T>& outer, BatchShape s, const T* x,
                          const std::int32_t* targets, double* logp) const;
  /// Full-vocabulary logits gathered over tp, on the host: (B, valid_vocab) floats for the
  /// last position of each sequence (generation), or (N, valid_vocab) for every position
  /// (reference tests).
  std::vector<float> logits(const ComputeContext& ctx, const OuterParams<T>& outer, BatchShape s, const T* x,
                            bool last_only) const;

 private:
  /// Layer i's slice of a KV cache for one forward over new positions pos0 .. pos0+T-1.
  struct KvSlot {
    T* k = nullptr;  ///< (B, kv_heads, T_max, head_dim)
    T* v = nullptr;
    int T_max = 0, pos0 = 0;
  };
  /// Without kv: causal self-attention over the T positions (training, evaluation). With
  /// kv: attention over the cache, the new keys/values written into it.
  void gpt2_forward(const ComputeContext& ctx, const T* params, BatchShape s, const T* x_in, T* x_out,
                    BlockCache<T>& c, const KvSlot* kv = nullptr) const;
  void gpt2_backward(const ComputeContext& ctx, const T* params, acc_t<T>* grads, BatchShape s,
                     const T* x_in, BlockCache<T>& c, T* dx) const;
  void llama_forward(const ComputeContext& ctx, const T* params, BatchShape s, const T* x_in, T* x_out,
                     BlockCache<T>& c, const KvSlot* kv = nullptr) const;
  void llama_backward(const ComputeContext& ctx, const T* params, acc_t<T>* grads, BatchShape s,
                      const T* x_in, BlockCache<T>& c, T* dx) const;
  void final_norm(const OuterParams<T>& outer, BatchShape s, const T* x, HeadCache<T>& hc) const;
  /// The forward head in chunks of rows: final norm, logits, and the tp-reduced
  /// cross-entropy statistics, handed to on_chunk(r0, rows, row_max, stats) per chunk.
  template <class ChunkFn>
  void head_forward_chunks(const ComputeContext& ctx, const OuterParams<T>& outer, BatchShape s, const T* x,
                           const std::int32_t* targets, ChunkFn&& on_chunk) const;
  /// The tp-reduced cross-entropy statistics of one chunk of logits (nc, Vl): row_max (nc),
  /// stats (2 nc), local_max (nc, scratch of the one-pass form). Three-pass phases 1-2, or
  /// under gpu.fused_loss the one-pass online statistics with the per-slice (max, sum) pairs
  /// merged over tp (kernels/cross_entropy_online.hpp).
  void ce_statistics(const ComputeContext& ctx, const T* logits, int nc, const std::int32_t* targets,
                     acc_t<T>* row_max, acc_t<T>* stats, acc_t<T>* local_max) const;
  std::int64_t head_offset() const;
  std::int64_t head_chunk_rows(int N) const;
  /// Scratch for the LM head's weight chunks (kHeadWeightChunkElements at most): empty
  /// unless the outer unit is kept quantized.
  Buffer<T> head_weight_scratch(const OuterParams<T>& outer) const;
  /// logits (rows, Vl) = h (rows, C) @ W^T. Kept quantized: W dequantized a chunk of
  /// vocabulary rows at a time into `scratch`, each chunk's logits columns by their own GEMM.
  void head_logits(const OuterParams<T>& outer, int rows, const T* h, T* logits, Buffer<T>& scratch) const;
  /// dh (rows, C) = dlogits (rows, Vl) @ W (overwrite). Kept quantized: W dequantized a chunk
  /// of columns at a time, each chunk's dh columns by their own GEMM over the whole vocabulary.
  void head_input_grad(const OuterParams<T>& outer, int rows, const T* dlogits, T* dh, Buffer<T>& scratch) const;
  // LoRA: adapter t (index into lora_target_names) of a block, when present.
  bool has_lora(int t) const { return t < static_cast<int>(lora_.size()) && lora_[t].a >= 0; }
  void lora_fwd(const ComputeContext& ctx, int t, const T* p, BlockCache<T>& c, int N, const T* x, int ldx, T* y,
                int ldy) const;
  void lora_bwd(int t, const T* p, acc_t<T>* g, BlockCache<T>& c, int N, const T* x, int ldx, const T* dy, int lddy, T* dx,
                int lddx) const;

  ModelDims dims_;
  TpDims tp_;
  KernelPaths paths_;
  /// Offsets (elements) of each role inside a block unit / the outer unit.
  std::vector<std::int64_t> block_off_;
  std::vector<std::int64_t> outer_off_;
  Buffer<float> rope_cos_, rope_sin_;  ///< (max_seq_len, head_dim/2) (llama)
  int qkv_width_ = 0;                  ///< local width of the fused q|k|v projection output
  /// LoRA adapter of one target projection inside a block unit.
  struct LoraSlot {
    std::int64_t a = -1, b = -1;  ///< offsets of A (r, in_l) and B (out_l, r); -1 = no adapter
    std::int64_t ga = -1, gb = -1;  ///< their offsets in the gradient buffer (the trainable segment)
    int in = 0, out = 0;          ///< local widths
    bool row_parallel = false;
  };
  std::vector<LoraSlot> lora_;
  std::int64_t head_weight_chunk_ = kHeadWeightChunkElements;
  std::int64_t head_chunk_ = kHeadChunkElements;
  bool train_base_ = true;             ///< false under LoRA: base weight gradients are skipped
  /// Gradient of the base parameter at unit offset `off`: without LoRA the trainable segment
  /// is the whole unit (grads share the parameters' offsets); under LoRA the base is frozen,
  /// has no gradient storage, and the kernels skip a nullptr parameter gradient.
  acc_t<T>* base_grad(acc_t<T>* g, std::int64_t off) const { return train_base_ ? g + off : nullptr; }
};

/// Role indices into the offset tables (see transformer.cpp for the HF role names).
enum Gpt2Role { G_LN1_W, G_LN1_B, G_ATTN_W, G_ATTN_B, G_PROJ_W, G_PROJ_B, G_LN2_W, G_LN2_B,
                G_FC_W, G_FC_B, G_FCPROJ_W, G_FCPROJ_B, G_NUM_ROLES };
enum LlamaRole { L_NORM1_W, L_Q_W, L_K_W, L_V_W, L_O_W, L_NORM2_W, L_GATE_W, L_UP_W, L_DOWN_W,
                 L_NUM_ROLES };
enum OuterRole { O_WTE, O_WPE, O_NORM_W, O_NORM_B, O_HEAD, O_NUM_ROLES };
/// LoRA targets in lora_target_names() order.
enum Gpt2Lora { GL_ATTN, GL_PROJ, GL_FC, GL_MLPPROJ };
enum LlamaLora { LL_Q, LL_K, LL_V, LL_O, LL_GATE, LL_UP, LL_DOWN };

}  // namespace meshtrain::model
