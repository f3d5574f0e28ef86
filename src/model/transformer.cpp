#include "model/transformer.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/cross_entropy_online.hpp"
#include "kernels/dequant.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/norms.hpp"
#include "kernels/preference.hpp"
#include "kernels/rope.hpp"
#include "kernels/step_scalars.hpp"
#include "linalg/gemm.hpp"
#include "model/lora.hpp"

namespace meshtrain::model {
namespace {

const char* kGpt2Roles[G_NUM_ROLES] = {"ln_1.weight",       "ln_1.bias",        "attn.c_attn.weight",
                                       "attn.c_attn.bias",  "attn.c_proj.weight", "attn.c_proj.bias",
                                       "ln_2.weight",       "ln_2.bias",        "mlp.c_fc.weight",
                                       "mlp.c_fc.bias",     "mlp.c_proj.weight", "mlp.c_proj.bias"};
const char* kLlamaRoles[L_NUM_ROLES] = {"input_layernorm.weight", "self_attn.q_proj.weight",
                                        "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                        "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                        "mlp.gate_proj.weight",   "mlp.up_proj.weight",
                                        "mlp.down_proj.weight"};

std::vector<std::int64_t> role_offsets(const std::vector<ParamSpec>& specs, const UnitLayout& L,
                                       const char* const* roles, int n, bool allow_missing) {
  std::vector<std::int64_t> off(n, -1);
  for (int r = 0; r < n; ++r) {
    if (!roles[r]) continue;
    const ParamSlot* s = L.find(specs, roles[r]);
    MESHTRAIN_ASSERT(s || allow_missing, "parameter role %s missing from unit %d", roles[r], L.unit);
    if (s) off[r] = s->offset;
  }
  return off;
}

}  // namespace

template <class T>
Transformer<T>::Transformer(const ModelDims& dims, const TpDims& tp, const std::vector<ParamSpec>& specs,
                            const std::vector<UnitLayout>& layouts, KernelPaths paths)
    : dims_(dims), tp_(tp), paths_(paths) {
  const bool gpt2 = dims.family == Family::Gpt2;
  if (dims.n_layers > 0) {
    block_off_ = gpt2 ? role_offsets(specs, layouts[1], kGpt2Roles, G_NUM_ROLES, false)
                      : role_offsets(specs, layouts[1], kLlamaRoles, L_NUM_ROLES, false);
    // Fused projections rely on adjacency in the flat buffer.
    if (!gpt2) {
      const auto& L = layouts[1];
      const std::int64_t q = L.find(specs, kLlamaRoles[L_Q_W])->numel;
      const std::int64_t k = L.find(specs, kLlamaRoles[L_K_W])->numel;
      const std::int64_t g = L.find(specs, kLlamaRoles[L_GATE_W])->numel;
      MESHTRAIN_ASSERT(block_off_[L_K_W] == block_off_[L_Q_W] + q && block_off_[L_V_W] == block_off_[L_K_W] + k &&
                           block_off_[L_UP_W] == block_off_[L_GATE_W] + g,
                       "q|k|v and gate|up must be adjacent in the flat layout (align the sizes to %lld)",
                       static_cast<long long>(kFlatAlign));
    }
  }
  const char* outer_roles[O_NUM_ROLES];
  if (gpt2) {
    outer_roles[O_WTE] = "wte.weight";
    outer_roles[O_WPE] = "wpe.weight";
    outer_roles[O_NORM_W] = "ln_f.weight";
    outer_roles[O_NORM_B] = "ln_f.bias";
    outer_roles[O_HEAD] = nullptr;
  } else {
    outer_roles[O_WTE] = "model.embed_tokens.weight";
    outer_roles[O_WPE] = nullptr;
    outer_roles[O_NORM_W] = "model.norm.weight";
    outer_roles[O_NORM_B] = nullptr;
    outer_roles[O_HEAD] = dims.tied ? nullptr : "lm_head.weight";
  }
  outer_off_ = role_offsets(specs, layouts[0], outer_roles, O_NUM_ROLES, false);
  if (dims.lora_rank > 0 && dims.n_layers > 0) {
    train_base_ = false;
    const std::vector<std::string> targets = lora_target_names(dims.family);
    lora_.resize(targets.size());
    for (std::size_t t = 0; t < targets.size(); ++t) {
      const UnitLayout& L = layouts[1];
      // The adapter's role is its base projection's role with .lora_A/.lora_B.
      for (const ParamSlot& slot : L.slots) {
        const ParamSpec& p = specs[slot.spec];
        if (!p.is_lora) continue;
        const std::string module = p.role.substr(0, p.role.rfind(".lora_"));
        const bool is_a = p.role.find(".lora_A.") != std::string::npos;
        const bool match = module == lora_target_role(dims.family, static_cast<int>(t));
        if (!match) continue;
        if (is_a) {
          lora_[t].a = slot.offset;
          lora_[t].ga = slot.offset - L.trainable_begin();
          lora_[t].in = static_cast<int>(slot.local_shape[1]);
          lora_[t].row_parallel = p.split_dim == 1;
        } else {
          lora_[t].b = slot.offset;
          lora_[t].gb = slot.offset - L.trainable_begin();
          lora_[t].out = static_cast<int>(slot.local_shape[0]);
        }
      }
    }
  }
  const int hd = dims.head_dim;
  qkv_width_ = gpt2 ? 3 * tp.heads * hd : (tp.heads + 2 * tp.kv_heads) * hd;
  if (!gpt2) {
    const std::size_t n = static_cast<std::size_t>(dims.max_seq_len) * (hd / 2);
    rope_cos_ = Buffer<float>(n, MemCategory::Workspace);
    rope_sin_ = Buffer<float>(n, MemCategory::Workspace);
    kernels::rope_tables(dims.rope_theta, hd, dims.max_seq_len, rope_cos_.data(), rope_sin_.data());
  }
}

template <class T>
void Transformer<T>::block_forward(const ComputeContext& ctx, int i, const T* params, BatchShape s,
                                   const T* x_in, T* x_out, BlockCache<T>& cache, bool checkpoint) const {
  MESHTRAIN_ASSERT(s.T <= dims_.max_seq_len, "sequence length %d exceeds model.max_seq_len %d", s.T,
                   dims_.max_seq_len);
  if (dims_.family == Family::Gpt2) gpt2_forward(ctx, params, s, x_in, x_out, cache);
  else llama_forward(ctx, params, s, x_in, x_out, cache);
  cache.filled = true;
  if (checkpoint) cache.clear();  // recomputed in backward from x_in
}

template <class T>
void Transformer<T>::block_forward_cached(const ComputeContext& ctx, int i, const T* params, BatchShape s,
                                          const T* x_in, T* x_out, KvCache<T>& kv) const {
  MESHTRAIN_ASSERT(s.B == kv.B && kv.filled + s.T <= kv.T_max && i < static_cast<int>(kv.k.size()),
                   "KV cache: %d x %d new positions after %d do not fit its %d x %d slots (layer %d of %d)", s.B,
                   s.T, kv.filled, kv.B, kv.T_max, i, static_cast<int>(kv.k.size()));
  const KvSlot slot{kv.k[i].data(), kv.v[i].data(), kv.T_max, kv.filled};
  BlockCache<T> unused;  // forward only: the saved activations are dropped on return
  if (dims_.family == Family::Gpt2) gpt2_forward(ctx, params, s, x_in, x_out, unused, &slot);
  else llama_forward(ctx, params, s, x_in, x_out, unused, &slot);
}

template <class T>
void Transformer<T>::block_backward(const ComputeContext& ctx, int i, const T* params, acc_t<T>* grads, BatchShape s,
                                    const T* x_in, BlockCache<T>& cache, T* dx) const {
  if (!cache.filled) {
    // Activation checkpointing: recompute this block's forward (including its tp
    // all-reduces) to rebuild the cache; the recomputed output is discarded.
    Buffer<T> scratch(static_cast<std::size_t>(s.N()) * dims_.d_model, MemCategory::Workspace);
    if (dims_.family == Family::Gpt2) gpt2_forward(ctx, params, s, x_in, scratch.data(), cache);
    else llama_forward(ctx, params, s, x_in, scratch.data(), cache);
  }
  if (dims_.family == Family::Gpt2) gpt2_backward(ctx, params, grads, s, x_in, cache, dx);
  else llama_backward(ctx, params, grads, s, x_in, cache, dx);
  cache.clear();
}

template <class T>
void Transformer<T>::embed_forward(const ComputeContext& ctx, const OuterParams<T>& outer, const std::int32_t* tokens,
                                   BatchShape s, T* x, int pos0) const {
  MESHTRAIN_ASSERT(pos0 >= 0 && pos0 + s.T <= dims_.max_seq_len, "positions [%d, %d) exceed model.max_seq_len %d",
                   pos0, pos0 + s.T, dims_.max_seq_len);
  const int C = dims_.d_model;
  // x (N, C): rows of this rank's vocab slice; other ranks fill the rest, summed over tp.
  // Kept quantized: only the rows looked up are dequantized, straight into x.
  if (outer.quantized())
    kernels::dequantize_gather_rows(outer.quant, outer_off_[O_WTE], C, tokens, s.N(), tp_.vocab_start, tp_.vocab, x);
  else
    kernels::embedding_forward(tokens, s.N(), outer.unit + outer_off_[O_WTE], tp_.vocab_start, tp_.vocab, C, x);
  ctx.tp_all_reduce(x, static_cast<std::size_t>(s.N()) * C);
  if (dims_.family != Family::Gpt2) return;
  if (!outer.quantized()) {
    kernels::add_position_embedding(x, outer.unit + outer_off_[O_WPE] + static_cast<std::int64_t>(pos0) * C, s.B, s.T,
                                    C, s.doc_start);
    return;
  }
  // positions (T, C): rows pos0 .. pos0 + T - 1 of wpe, the only ones a position (restarted
  // per document or not) can take here.
  Buffer<T> positions(static_cast<std::size_t>(s.T) * C, MemCategory::Workspace);
  kernels::dequantize_rect(outer.quant, outer_off_[O_WPE], C, pos0, s.T, 0, C, positions.data(), C);
  kernels::add_position_embedding(x, positions.data(), s.B, s.T, C, s.doc_start);
}

template <class T>
void Transformer<T>::lora_fwd(const ComputeContext& ctx, int t, const T* p, BlockCache<T>& c, int N, const T* x,
                              int ldx, T* y, int ldy) const {
  // Every tp rank skips alike (the row-parallel adapter's all-reduce included).
  if (!has_lora(t) || ctx.adapters_off) return;
  const LoraSlot& l = lora_[t];
  if (c.lora_u.size() < lora_.size()) c.lora_u.resize(lora_.size());
  c.lora_u[t] = Buffer<T>(static_cast<std::size_t>(N) * dims_.lora_rank, MemCategory::Activations);
  const LoraShape sh{N, l.in, l.out, dims_.lora_rank, static_cast<float>(dims_.lora_scale())};
  if (l.row_parallel) lora_forward_row(ctx, tp_.rank, sh, x, ldx, p + l.a, p + l.b, y, ldy, c.lora_u[t].data());
  else lora_forward_column(sh, x, ldx, p + l.a, p + l.b, y, ldy, c.lora_u[t].data());
}

template <class T>
void Transformer<T>::lora_bwd(int t, const T* p, acc_t<T>* g, BlockCache<T>& c, int N, const T* x, int ldx, const T* dy,
                              int lddy, T* dx, int lddx) const {
  if (!has_lora(t)) return;
  const LoraSlot& l = lora_[t];
  const LoraShape sh{N, l.in, l.out, dims_.lora_rank, static_cast<float>(dims_.lora_scale())};
  Buffer<T> du(static_cast<std::size_t>(N) * dims_.lora_rank, MemCategory::Workspace);
  lora_backward(sh, x, ldx, p + l.a, p + l.b, dy, lddy, c.lora_u[t].data(), g + l.ga, g + l.gb, dx, lddx, du.data());
}

template <class T>
void Transformer<T>::embed_backward(const ComputeContext&, acc_t<T>* outer_grad, const std::int32_t* tokens, BatchShape s,
                                    const T* dx) const {
  if (!train_base_) return;  // LoRA: the embeddings are frozen
  const int C = dims_.d_model;
  // dx is identical on every tp rank; each accumulates the rows of its own vocab slice.
  kernels::embedding_backward(tokens, s.N(), dx, tp_.vocab_start, tp_.vocab, C, outer_grad + outer_off_[O_WTE],
                              s.token_grad_index);
  if (dims_.family == Family::Gpt2)
    kernels::position_embedding_backward(dx, outer_grad + outer_off_[O_WPE], s.B, s.T, C, s.doc_start);
}

template <class T>
std::int64_t Transformer<T>::head_offset() const {
  return outer_off_[O_HEAD] >= 0 ? outer_off_[O_HEAD] : outer_off_[O_WTE];
}

namespace {
/// Chunk width for `budget` elements of `per` elements each: at least 1 (then a chunk is
/// `per` elements, over the budget); at most `total` (one chunk when everything fits);
/// otherwise a multiple of 64, or of 8, when the budget allows (chunk boundaries on the GEMM
/// kernels' tile boundaries).
std::int64_t chunk_width(std::int64_t budget, std::int64_t per, std::int64_t total) {
  std::int64_t w = std::max<std::int64_t>(1, budget / std::max<std::int64_t>(1, per));
  if (w >= total) return total;
  if (w >= 64) return w / 64 * 64;
  if (w >= 8) return w / 8 * 8;
  return w;
}
}  // namespace

std::int64_t head_weight_chunk_elements(std::int64_t vocab_local, int d_model, std::int64_t budget) {
  const std::int64_t C = d_model, Vl = vocab_local;
  // The larger of a vocabulary-row chunk (head_logits) and a column chunk (head_input_grad).
  return std::max(chunk_width(budget, C, Vl) * C, Vl * chunk_width(budget, Vl, C));
}

template <class T>
Buffer<T> Transformer<T>::head_weight_scratch(const OuterParams<T>& outer) const {
  if (!outer.quantized()) return Buffer<T>();
  const std::int64_t n = head_weight_chunk_elements(tp_.vocab, dims_.d_model, head_weight_chunk_);
  return Buffer<T>(static_cast<std::size_t>(n), MemCategory::Workspace);
}

template <class T>
void Transformer<T>::head_logits(const OuterParams<T>& outer, int rows, const T* h, T* logits,
                                 Buffer<T>& scratch) const {
  using linalg::Op;
  const int C = dims_.d_model;
  const int Vl = static_cast<int>(tp_.vocab);
  if (!outer.quantized()) {
    linalg::gemm<T>(Op::N, Op::T, rows, Vl, C, 1.0f, h, C, outer.unit + head_offset(), C, 0.0f, logits, Vl);
    return;
  }
  // Vocabulary rows [v0, v0 + n) of W (n, C), dequantized, give logits columns [v0, v0 + n).
  // Each logit is the same dot product as in one GEMM over the whole vocabulary, but the BLAS
  // may order its sum differently for another n (doc/finetuning.md: the head's chunks).
  const std::int64_t width = chunk_width(head_weight_chunk_, C, Vl);
  for (std::int64_t v0 = 0; v0 < Vl; v0 += width) {
    const std::int64_t n = std::min<std::int64_t>(width, Vl - v0);
    kernels::dequantize_rect(outer.quant, head_offset(), C, v0, n, 0, C, scratch.data(), C);
    linalg::gemm<T>(Op::N, Op::T, rows, static_cast<int>(n), C, 1.0f, h, C, scratch.data(), C, 0.0f, logits + v0, Vl);
  }
}

template <class T>
void Transformer<T>::head_input_grad(const OuterParams<T>& outer, int rows, const T* dlogits, T* dh,
                                     Buffer<T>& scratch) const {
  using linalg::Op;
  const int C = dims_.d_model;
  const int Vl = static_cast<int>(tp_.vocab);
  if (!outer.quantized()) {
    linalg::gemm<T>(Op::N, Op::N, rows, C, Vl, 1.0f, dlogits, Vl, outer.unit + head_offset(), C, 0.0f, dh, C);
    return;
  }
  // Columns [c0, c0 + n) of W (Vl, n), dequantized, give dh columns [c0, c0 + n): each GEMM
  // still sums over the whole vocabulary (chunking the vocabulary instead would add partial
  // sums, rounded to T in between).
  const std::int64_t width = chunk_width(head_weight_chunk_, Vl, C);
  for (std::int64_t c0 = 0; c0 < C; c0 += width) {
    const std::int64_t n = std::min<std::int64_t>(width, C - c0);
    kernels::dequantize_rect(outer.quant, head_offset(), C, 0, Vl, c0, n, scratch.data(), n);
    linalg::gemm<T>(Op::N, Op::N, rows, static_cast<int>(n), Vl, 1.0f, dlogits, Vl, scratch.data(), static_cast<int>(n),
                    0.0f, dh + c0, C);
  }
}

template <class T>
std::int64_t Transformer<T>::head_chunk_rows(int N) const {
  // Bound the logits scratch (rows x local vocab) to kHeadChunkElements (head_chunk_).
  const std::int64_t limit = std::max<std::int64_t>(1, head_chunk_ / std::max<std::int64_t>(1, tp_.vocab));
  return std::min<std::int64_t>(N, limit);
}

template <class T>
void Transformer<T>::final_norm(const OuterParams<T>& outer, BatchShape s, const T* x, HeadCache<T>& hc) const {
  const int N = s.N(), C = dims_.d_model;
  hc.normed = Buffer<T>(static_cast<std::size_t>(N) * C, MemCategory::Activations);
  hc.rstd = Buffer<acc_t<T>>(N, MemCategory::Activations);
  if (dims_.family == Family::Gpt2) {
    hc.mean = Buffer<acc_t<T>>(N, MemCategory::Activations);
    kernels::layernorm_forward(x, outer.at(outer_off_[O_NORM_W]), outer.at(outer_off_[O_NORM_B]), dims_.norm_eps, N, C,
                               hc.normed.data(), hc.mean.data(), hc.rstd.data(), paths_.norm_form, paths_.row_packs);
  } else {
    kernels::rmsnorm_forward(x, outer.at(outer_off_[O_NORM_W]), dims_.norm_eps, N, C, hc.normed.data(), hc.rstd.data(),
                             paths_.norm_form, paths_.row_packs);
  }
}

template <class T>
void Transformer<T>::ce_statistics(const ComputeContext& ctx, const T* logits, int nc, const std::int32_t* targets,
                                   acc_t<T>* row_max, acc_t<T>* stats, acc_t<T>* local_max) const {
  const int Vl = static_cast<int>(tp_.vocab);
  if (paths_.fused_loss) {
    // One read of the logits; the slices' (max, sum) pairs merge by the online-softmax rule
    // in the three-pass path's two reductions (the Communicator has no user-defined
    // reduction for a packed pair, and the rows of a chunk are few: two small all-reduces).
    kernels::cross_entropy_online_stats(logits, Vl, nc, Vl, tp_.vocab_start, dims_.valid_vocab, targets, local_max,
                                        row_max, stats, paths_.row_packs);
    if (ctx.tp_size() > 1) {
      ctx.tp_all_reduce(row_max, nc, ReduceOp::Max);
      kernels::cross_entropy_rescale_sums(nc, local_max, row_max, stats);
      ctx.tp_all_reduce(stats, 2 * static_cast<std::size_t>(nc));
    }
    return;
  }
  kernels::cross_entropy_row_max(logits, Vl, nc, Vl, tp_.vocab_start, dims_.valid_vocab, row_max);
  ctx.tp_all_reduce(row_max, nc, ReduceOp::Max);
  kernels::cross_entropy_row_sums(logits, Vl, nc, Vl, tp_.vocab_start, dims_.valid_vocab, targets, row_max, stats);
  // stats (2, nc): [sum exp | target logit], both summed over the vocab slices.
  ctx.tp_all_reduce(stats, 2 * static_cast<std::size_t>(nc));
}

template <class T>
double Transformer<T>::head_forward_backward(const ComputeContext& ctx, const OuterParams<T>& outer, acc_t<T>* outer_grad, BatchShape s,
                                             const T* x, const std::int32_t* targets, float grad_scale,
                                             T* dx, const float* row_scale, double* loss_sum) const {
  using linalg::Op;
  const int N = s.N(), C = dims_.d_model;
  const int Vl = static_cast<int>(tp_.vocab);
  HeadCache<T> hc;
  final_norm(outer, s, x, hc);
  // W (Vl, C): the head's weight (tied: the embedding), read by head_logits / head_input_grad.
  acc_t<T>* dW = base_grad(outer_grad, head_offset());
  MESHTRAIN_ASSERT(dW == nullptr || !outer.quantized(), "a quantized LM head has no weight gradient");
  Buffer<T> w_scratch = head_weight_scratch(outer);
  const std::int64_t chunk = head_chunk_rows(N);
  Buffer<T> logits(static_cast<std::size_t>(chunk) * Vl, MemCategory::Workspace);
  Buffer<acc_t<T>> row_max(chunk, MemCategory::Workspace);
  Buffer<acc_t<T>> stats(2 * chunk, MemCategory::Workspace);
  Buffer<T> dnormed(static_cast<std::size_t>(N) * C, MemCategory::Workspace);
  // gpu.fused_loss: each chunk's loss stays on the device, (chunks), read once after the loop.
  const std::int64_t n_chunks = (N + chunk - 1) / chunk;
  Buffer<double> chunk_loss(paths_.fused_loss ? n_chunks : 0, MemCategory::Workspace);
  Buffer<acc_t<T>> local_max(paths_.fused_loss && ctx.tp_size() > 1 ? chunk : 0, MemCategory::Workspace);
  double loss = 0;
  for (std::int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int nc = static_cast<int>(std::min<std::int64_t>(chunk, N - r0));
    const T* h = hc.normed.data() + r0 * C;
    // logits (nc, Vl) = h (nc, C) @ W^T
    head_logits(outer, nc, h, logits.data(), w_scratch);
    ctx.poll();
    const float* rs = row_scale ? row_scale + r0 : nullptr;
    if (paths_.fused_loss && ctx.tp_size() == 1) {
      // The whole vocabulary is here: statistics and dlogits in one launch.
      kernels::cross_entropy_fused(logits.data(), Vl, nc, Vl, dims_.valid_vocab, targets + r0, grad_scale, rs,
                                   chunk_loss.data() + r0 / chunk, paths_.row_packs);
    } else {
      ce_statistics(ctx, logits.data(), nc, targets + r0, row_max.data(), stats.data(), local_max.data());
      if (paths_.fused_loss)
        kernels::cross_entropy_finish_into(logits.data(), Vl, nc, Vl, tp_.vocab_start, dims_.valid_vocab, targets + r0,
                                           row_max.data(), stats.data(), grad_scale, rs, chunk_loss.data() + r0 / chunk);
      else
        loss += kernels::cross_entropy_finish(logits.data(), Vl, nc, Vl, tp_.vocab_start, dims_.valid_vocab,
                                              targets + r0, row_max.data(), stats.data(), grad_scale, rs);
    }
    // dW (Vl, C) += dlogits^T (Vl, nc) @ h (nc, C), in acc_t<T>: the chunks' partial sums add
    // in fp32 (bf16 compute), not rounded to bf16 after each;  dh (nc, C) = dlogits @ W
    if (train_base_) linalg::gemm_acc<T>(Op::T, Op::N, Vl, C, nc, 1.0f, logits.data(), Vl, h, C, 1.0f, dW, C);
    ctx.poll();
    head_input_grad(outer, nc, logits.data(), dnormed.data() + r0 * C, w_scratch);
    ctx.poll();
  }
  ctx.tp_all_reduce(dnormed.data(), static_cast<std::size_t>(N) * C);
  if (loss_sum != nullptr) {
    // The training step keeps the loss on the device: the same sum, in chunk order from 0,
    // then added to the step's (kernels/step_scalars.hpp).
    if (paths_.fused_loss) kernels::add_in_order(chunk_loss.data(), static_cast<int>(chunk_loss.size()), loss_sum);
    else kernels::add_scalar(loss_sum, loss);
    loss = 0;
  } else if (paths_.fused_loss) {
    // The one read of the loss in this head (summed in chunk order: deterministic).
    std::vector<double> host(chunk_loss.size());
    Kokkos::deep_copy(UView<double, HostMem>(host.data(), host.size()), chunk_loss.view());
    for (const double l : host) loss += l;
  }
  kernels::fill(dx, static_cast<std::size_t>(N) * C, 0.0);
  if (dims_.family == Family::Gpt2) {
    kernels::layernorm_backward(dnormed.data(), x, outer.at(outer_off_[O_NORM_W]), hc.mean.data(), hc.rstd.data(), N, C,
                                dx, base_grad(outer_grad, outer_off_[O_NORM_W]), base_grad(outer_grad, outer_off_[O_NORM_B]),
                                paths_.norm_form, paths_.row_packs);
  } else {
    kernels::rmsnorm_backward(dnormed.data(), x, outer.at(outer_off_[O_NORM_W]), hc.rstd.data(), N, C, dx,
                              base_grad(outer_grad, outer_off_[O_NORM_W]), paths_.norm_form, paths_.row_packs);
  }
  return loss;
}

template <class T>
template <class ChunkFn>
void Transformer<T>::head_forward_chunks(const ComputeContext& ctx, const OuterParams<T>& outer, BatchShape s,
                                         const T* x, const std::int32_t* targets, ChunkFn&& on_chunk) const {
  const int N = s.N(), C = dims_.d_model;
  const int Vl = static_cast<int>(tp_.vocab);
  HeadCache<T> hc;
  final_norm(outer, s, x, hc);
  Buffer<T> w_scratch = head_weight_scratch(outer);
  const std::int64_t chunk = head_chunk_rows(N);
  Buffer<T> logits(static_cast<std::size_t>(chunk) * Vl, MemCategory::Workspace);
  Buffer<acc_t<T>> row_max(chunk, MemCategory::Workspace);
  Buffer<acc_t<T>> stats(2 * chunk, MemCategory::Workspace);
  Buffer<acc_t<T>> local_max(paths_.fused_loss ? chunk : 0, MemCategory::Workspace);
  for (std::int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int nc = static_cast<int>(std::min<std::int64_t>(chunk, N - r0));
    head_logits(outer, nc, hc.normed.data() + r0 * C, logits.data(), w_scratch);
    ce_statistics(ctx, logits.data(), nc, targets + r0, row_max.data(), stats.data(), local_max.data());
    on_chunk(r0, nc, row_max.data(), stats.data());
  }
}

template <class T>
double Transformer<T>::head_loss(const ComputeContext& ctx, const OuterParams<T>& outer, BatchShape s, const T* x,
                                 const std::int32_t* targets) const {
  double loss = 0;
  head_forward_chunks(ctx, outer, s, x, targets,
                      [&](std::int64_t r0, int nc, const acc_t<T>* row_max, const acc_t<T>* stats) {
                        loss += kernels::cross_entropy_loss_sum(nc, targets + r0, row_max, stats);
                      });
  return loss;
}

template <class T>
void Transformer<T>::head_sequence_logp(const ComputeContext& ctx, const OuterParams<T>& outer, BatchShape s,
                                        const T* x, const std::int32_t* targets, double* logp) const {
  // losses (N): -log p(target) of each row, 0 where the target is ignored; identical on
  // every tp rank (the statistics are summed over the vocab slices).
  Buffer<acc_t<T>> losses(static_cast<std::size_t>(s.N()), MemCategory::Workspace);
  head_forward_chunks(ctx, outer, s, x, targets,
                      [&](std::int64_t r0, int nc, const acc_t<T>* row_max, const acc_t<T>* stats) {
                        kernels::cross_entropy_row_losses(nc, targets + r0, row_max, stats, losses.data() + r0);
                      });
  kernels::sequence_logps(losses.data(), s.B, s.T, logp);
}

template <class T>
std::vector<double> Transformer<T>::head_sequence_logp(const ComputeContext& ctx, const OuterParams<T>& outer,
                                                       BatchShape s, const T* x, const std::int32_t* targets) const {
  Buffer<double> dev(static_cast<std::size_t>(s.B), MemCategory::Workspace);
  head_sequence_logp(ctx, outer, s, x, targets, dev.data());
  std::vector<double> logp(static_cast<std::size_t>(s.B));
  Kokkos::deep_copy(UView<double, HostMem>(logp.data(), logp.size()), dev.view());
  return logp;
}

template <class T>
std::vector<float> Transformer<T>::logits(const ComputeContext& ctx, const OuterParams<T>& outer, BatchShape s,
                                          const T* x, bool last_only) const {
  const int C = dims_.d_model;
  const int Vl = static_cast<int>(tp_.vocab);
  HeadCache<T> hc;
  final_norm(outer, s, x, hc);
  // rows (R, C): the last position of each sequence, or every position.
  const int R = last_only ? s.B : s.N();
  Buffer<T> rows(static_cast<std::size_t>(R) * C, MemCategory::Workspace);
  if (last_only) {
    for (int b = 0; b < s.B; ++b)
      Kokkos::deep_copy(rows.view(static_cast<std::size_t>(b) * C, C),
                        UView<T>(hc.normed.data() + (static_cast<std::size_t>(b) * s.T + s.T - 1) * C, C));
  } else {
    Kokkos::deep_copy(rows.view(), hc.normed.view());
  }
  Buffer<T> out(static_cast<std::size_t>(R) * Vl, MemCategory::Workspace);
  Buffer<T> w_scratch = head_weight_scratch(outer);
  head_logits(outer, R, rows.data(), out.data(), w_scratch);
  Buffer<float> local(out.size(), MemCategory::Workspace);
  kernels::cast(out.data(), local.data(), local.size());
  // all-gather over tp: (tp, R, Vl), then reorder to (R, valid_vocab) on the host.
  const int tp = ctx.tp_size();
  Buffer<float> all(local.size() * tp, MemCategory::Workspace);
  if (tp > 1) ctx.tp->all_gather(local.data(), all.data(), local.size(), DType::F32);
  else Kokkos::deep_copy(all.view(), local.view());
  std::vector<float> host(all.size());
  Kokkos::deep_copy(UView<float, HostMem>(host.data(), host.size()), all.view());
  const std::int64_t V = dims_.valid_vocab;
  std::vector<float> result(static_cast<std::size_t>(R) * V);
  for (int r = 0; r < tp; ++r)
    for (int row = 0; row < R; ++row)
      for (int v = 0; v < Vl; ++v) {
        const std::int64_t id = static_cast<std::int64_t>(r) * Vl + v;
        if (id < V) result[row * V + id] = host[(static_cast<std::size_t>(r) * R + row) * Vl + v];
      }
  return result;
}

template class Transformer<float>;
template class Transformer<double>;
template class Transformer<bf16>;

}  // namespace meshtrain::model
