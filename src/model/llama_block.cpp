// Llama block: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, no biases; HF Linear
// weights (out, in).
//   x_mid = x_in + o_proj(attn(rope(q|k|v_proj(norm1(x_in)))))   q|k|v column-parallel, o row-parallel
//   x_out = x_mid + down(silu(gate(n2)) * up(n2)), n2 = norm2(x_mid)   gate|up column-, down row-parallel
#include <cmath>

#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/norms.hpp"
#include "kernels/residual_norms.hpp"
#include "kernels/rope.hpp"
#include "linalg/gemm.hpp"
#include "model/transformer.hpp"

namespace meshtrain::model {

using linalg::Op;

template <class T>
void Transformer<T>::llama_forward(const ComputeContext& ctx, const T* p, BatchShape s, const T* x_in, T* x_out,
                                   BlockCache<T>& c, const KvSlot* kv) const {
  const int N = s.N(), C = dims_.d_model, hd = dims_.head_dim;
  const int Hl = tp_.heads, KVl = tp_.kv_heads, Ql = Hl * hd, Fl = tp_.ffn, W = qkv_width_;  // W = (Hl+2KVl)hd
  const auto n = [](std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); };
  const auto* o = block_off_.data();

  c.norm1 = Buffer<T>(n(N, C), MemCategory::Activations);
  c.rstd1 = Buffer<acc_t<T>>(N, MemCategory::Activations);
  kernels::rmsnorm_forward(x_in, p + o[L_NORM1_W], dims_.norm_eps, N, C, c.norm1.data(), c.rstd1.data(),
                           paths_.norm_form, paths_.row_packs);
  // qkv (N, W) = norm1 (N, C) @ [q;k;v]^T (C, W)   (the three weights are adjacent rows)
  c.qkv = Buffer<T>(n(N, W), MemCategory::Activations);
  linalg::gemm<T>(Op::N, Op::T, N, W, C, 1.0f, c.norm1.data(), C, p + o[L_Q_W], C, 0.0f, c.qkv.data(), W);
  lora_fwd(ctx, LL_Q, p, c, N, c.norm1.data(), C, c.qkv.data(), W);
  lora_fwd(ctx, LL_K, p, c, N, c.norm1.data(), C, c.qkv.data() + Ql, W);
  lora_fwd(ctx, LL_V, p, c, N, c.norm1.data(), C, c.qkv.data() + Ql + KVl * hd, W);
  // Rows are positions pos0 .. pos0+T-1 (pos0 > 0 only when decoding against a KV cache):
  // the tables start at row pos0.
  const int pos0 = kv ? kv->pos0 : 0;
  const float* rcos = rope_cos_.data() + static_cast<std::int64_t>(pos0) * (hd / 2);
  const float* rsin = rope_sin_.data() + static_cast<std::int64_t>(pos0) * (hd / 2);
  // q's Hl heads and k's KVl heads are adjacent in a qkv row: one launch rotates both.
  kernels::rope_forward(c.qkv.data(), W, s.B, s.T, Hl + KVl, hd, rcos, rsin, s.doc_start, paths_.row_packs);
  ctx.poll();

  const kernels::AttentionShape as = attention_shape(dims_, tp_, s, ctx.attention);
  c.attn_out = Buffer<T>(n(N, Ql), MemCategory::Activations);
  if (kv) {
    // Generation: append this chunk's rotated k and v to the cache, attend over all of it.
    kernels::kv_cache_write(as, pos0, kv->T_max, c.qkv.data() + Ql, W, c.qkv.data() + Ql + KVl * hd, W, kv->k, kv->v);
    Buffer<T> scores(n(static_cast<std::int64_t>(s.B) * Hl * s.T, pos0 + s.T), MemCategory::Workspace);
    kernels::attention_forward_cached(as, pos0, kv->T_max, c.qkv.data(), W, kv->k, kv->v, c.attn_out.data(), Ql,
                                      scores.data());
  } else {
    c.attn_stats = Buffer<acc_t<T>>(n(static_cast<std::int64_t>(s.B) * Hl * s.T, 2), MemCategory::Activations);
    Buffer<T> work(kernels::attention_workspace_elems(as), MemCategory::Workspace);
    kernels::attention_forward(as, c.qkv.data(), W, c.qkv.data() + Ql, W, c.qkv.data() + Ql + KVl * hd, W,
                               c.attn_out.data(), Ql, c.attn_stats.data(), work.data());
  }
  ctx.poll();

  // x_mid (N, C) = attn_out (N, Ql) @ o_proj^T (Ql, C) -> sum over tp, + x_in
  c.x_mid = Buffer<T>(n(N, C), MemCategory::Activations);
  linalg::gemm<T>(Op::N, Op::T, N, C, Ql, 1.0f, c.attn_out.data(), Ql, p + o[L_O_W], Ql, 0.0f, c.x_mid.data(), C);
  lora_fwd(ctx, LL_O, p, c, N, c.attn_out.data(), Ql, c.x_mid.data(), C);
  ctx.tp_all_reduce(c.x_mid.data(), n(N, C));
  c.norm2 = Buffer<T>(n(N, C), MemCategory::Activations);
  c.rstd2 = Buffer<acc_t<T>>(N, MemCategory::Activations);
  if (paths_.fused_norms) {
    // x_mid += x_in and norm2 = post_attention_layernorm(x_mid) in one kernel.
    kernels::residual_rmsnorm_forward(c.x_mid.data(), x_in, p + o[L_NORM2_W], dims_.norm_eps, N, C, c.norm2.data(),
                                      c.rstd2.data(), paths_.norm_form, paths_.row_packs);
  } else {
    kernels::add_inplace(c.x_mid.data(), x_in, n(N, C));
    kernels::rmsnorm_forward(c.x_mid.data(), p + o[L_NORM2_W], dims_.norm_eps, N, C, c.norm2.data(), c.rstd2.data(),
                             paths_.norm_form, paths_.row_packs);
  }
  ctx.poll();
  // gate|up (N, 2Fl) = norm2 @ [gate; up]^T
  c.mlp_in = Buffer<T>(n(N, 2 * Fl), MemCategory::Activations);
  linalg::gemm<T>(Op::N, Op::T, N, 2 * Fl, C, 1.0f, c.norm2.data(), C, p + o[L_GATE_W], C, 0.0f, c.mlp_in.data(),
                  2 * Fl);
  lora_fwd(ctx, LL_GATE, p, c, N, c.norm2.data(), C, c.mlp_in.data(), 2 * Fl);
  lora_fwd(ctx, LL_UP, p, c, N, c.norm2.data(), C, c.mlp_in.data() + Fl, 2 * Fl);
  c.mlp_act = Buffer<T>(n(N, Fl), MemCategory::Activations);
  kernels::swiglu_forward(c.mlp_in.data(), c.mlp_in.data() + Fl, 2 * Fl, c.mlp_act.data(), Fl, N, Fl,
                          paths_.row_packs);
  ctx.poll();
  // x_out (N, C) = act (N, Fl) @ down^T (Fl, C) -> sum over tp, + x_mid
  linalg::gemm<T>(Op::N, Op::T, N, C, Fl, 1.0f, c.mlp_act.data(), Fl, p + o[L_DOWN_W], Fl, 0.0f, x_out, C);
  lora_fwd(ctx, LL_DOWN, p, c, N, c.mlp_act.data(), Fl, x_out, C);
  ctx.tp_all_reduce(x_out, n(N, C));
  kernels::add_inplace(x_out, c.x_mid.data(), n(N, C));
  ctx.poll();
}

template <class T>
void Transformer<T>::llama_backward(const ComputeContext& ctx, const T* p, acc_t<T>* g, BatchShape s, const T* x_in,
                                    BlockCache<T>& c, T* dx) const {
  const int N = s.N(), C = dims_.d_model, hd = dims_.head_dim;
  const int Hl = tp_.heads, KVl = tp_.kv_heads, Ql = Hl * hd, Fl = tp_.ffn, W = qkv_width_;
  const auto n = [](std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); };
  const auto* o = block_off_.data();

  // ---- MLP ------------------------------------------------------------------------------
  // d down (C, Fl) += dx^T (C, N) @ act (N, Fl)
  if (train_base_)
    linalg::gemm_acc<T>(Op::T, Op::N, C, Fl, N, 1.0f, dx, C, c.mlp_act.data(), Fl, 1.0f, g + o[L_DOWN_W], Fl);
  Buffer<T> dact(n(N, Fl), MemCategory::Workspace);
  linalg::gemm<T>(Op::N, Op::N, N, Fl, C, 1.0f, dx, C, p + o[L_DOWN_W], Fl, 0.0f, dact.data(), Fl);
  lora_bwd(LL_DOWN, p, g, c, N, c.mlp_act.data(), Fl, dx, C, dact.data(), Fl);
  ctx.poll();
  Buffer<T> dgu(n(N, 2 * Fl), MemCategory::Workspace);
  kernels::swiglu_backward(c.mlp_in.data(), c.mlp_in.data() + Fl, 2 * Fl, dact.data(), Fl, dgu.data(),
                           dgu.data() + Fl, N, Fl, paths_.row_packs);
  dact.reset();
  // d [gate; up] (2Fl, C) += dgu^T (2Fl, N) @ norm2 (N, C)
  if (train_base_)
    linalg::gemm_acc<T>(Op::T, Op::N, 2 * Fl, C, N, 1.0f, dgu.data(), 2 * Fl, c.norm2.data(), C, 1.0f, g + o[L_GATE_W], C);
  ctx.poll();
  Buffer<T> dnorm(n(N, C), MemCategory::Workspace);
  linalg::gemm<T>(Op::N, Op::N, N, C, 2 * Fl, 1.0f, dgu.data(), 2 * Fl, p + o[L_GATE_W], C, 0.0f, dnorm.data(), C);
  lora_bwd(LL_GATE, p, g, c, N, c.norm2.data(), C, dgu.data(), 2 * Fl, dnorm.data(), C);
  lora_bwd(LL_UP, p, g, c, N, c.norm2.data(), C, dgu.data() + Fl, 2 * Fl, dnorm.data(), C);
  dgu.reset();
  ctx.tp_all_reduce(dnorm.data(), n(N, C));
  if (paths_.fused_norms)
    kernels::residual_rmsnorm_backward(dnorm.data(), c.x_mid.data(), p + o[L_NORM2_W], c.rstd2.data(), N, C, dx,
                                       base_grad(g, o[L_NORM2_W]), paths_.norm_form, paths_.row_packs);
  else
    kernels::rmsnorm_backward(dnorm.data(), c.x_mid.data(), p + o[L_NORM2_W], c.rstd2.data(), N, C, dx,
                              base_grad(g, o[L_NORM2_W]), paths_.norm_form, paths_.row_packs);
  ctx.poll();

  // ---- attention ------------------------------------------------------------------------
  // d o_proj (C, Ql) += dx^T (C, N) @ attn_out (N, Ql)
  if (train_base_)
    linalg::gemm_acc<T>(Op::T, Op::N, C, Ql, N, 1.0f, dx, C, c.attn_out.data(), Ql, 1.0f, g + o[L_O_W], Ql);
  Buffer<T> dy(n(N, Ql), MemCategory::Workspace);
  linalg::gemm<T>(Op::N, Op::N, N, Ql, C, 1.0f, dx, C, p + o[L_O_W], Ql, 0.0f, dy.data(), Ql);
  lora_bwd(LL_O, p, g, c, N, c.attn_out.data(), Ql, dx, C, dy.data(), Ql);
  ctx.poll();
  const kernels::AttentionShape as = attention_shape(dims_, tp_, s, ctx.attention);
  Buffer<T> dqkv(n(N, W), MemCategory::Workspace);
  {
    Buffer<T> work(kernels::attention_workspace_elems(as), MemCategory::Workspace);
    const int kv_off = Ql + KVl * hd;
    kernels::attention_backward(as, c.qkv.data(), W, c.qkv.data() + Ql, W, c.qkv.data() + kv_off, W,
                                c.attn_out.data(), c.attn_stats.data(), dy.data(), Ql, dqkv.data(), dqkv.data() + Ql, dqkv.data() + kv_off, work.data());
  }
  dy.reset();
  kernels::rope_backward(dqkv.data(), W, s.B, s.T, Hl + KVl, hd, rope_cos_.data(), rope_sin_.data(), s.doc_start,
                         paths_.row_packs);
  ctx.poll();
  // d [q;k;v] (W, C) += dqkv^T (W, N) @ norm1 (N, C). With replicated kv heads the k/v
  // parts are partial over tp; the FSDP engine sums them over tp before reducing.
  if (train_base_)
    linalg::gemm_acc<T>(Op::T, Op::N, W, C, N, 1.0f, dqkv.data(), W, c.norm1.data(), C, 1.0f, g + o[L_Q_W], C);
  ctx.poll();
  linalg::gemm<T>(Op::N, Op::N, N, C, W, 1.0f, dqkv.data(), W, p + o[L_Q_W], C, 0.0f, dnorm.data(), C);
  lora_bwd(LL_Q, p, g, c, N, c.norm1.data(), C, dqkv.data(), W, dnorm.data(), C);
  lora_bwd(LL_K, p, g, c, N, c.norm1.data(), C, dqkv.data() + Ql, W, dnorm.data(), C);
  lora_bwd(LL_V, p, g, c, N, c.norm1.data(), C, dqkv.data() + Ql + KVl * hd, W, dnorm.data(), C);
  ctx.tp_all_reduce(dnorm.data(), n(N, C));
  kernels::rmsnorm_backward(dnorm.data(), x_in, p + o[L_NORM1_W], c.rstd1.data(), N, C, dx, base_grad(g, o[L_NORM1_W]),
                            paths_.norm_form, paths_.row_packs);
  ctx.poll();
}

#define MESHTRAIN_INSTANTIATE(T)                                                                           \
  template void Transformer<T>::llama_forward(const ComputeContext&, const T*, BatchShape, const T*, T*,   \
                                              BlockCache<T>&, const KvSlot*) const;                        \
  template void Transformer<T>::llama_backward(const ComputeContext&, const T*, acc_t<T>*, BatchShape,     \
                                               const T*, BlockCache<T>&, T*) const;
MESHTRAIN_INSTANTIATE(float)
MESHTRAIN_INSTANTIATE(double)
MESHTRAIN_INSTANTIATE(bf16)
#undef MESHTRAIN_INSTANTIATE

}  // namespace meshtrain::model
