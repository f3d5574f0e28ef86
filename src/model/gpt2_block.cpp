// GPT-2 block: pre-LayerNorm attention and GELU MLP with biases; HF Conv1D weights (in, out).
//   x_mid = x_in + c_proj(attn(c_attn(ln_1(x_in))))     c_attn column-parallel (q|k|v chunks)
//   x_out = x_mid + mlp.c_proj(gelu(mlp.c_fc(ln_2(x_mid))))   c_proj row-parallel + tp all-reduce
// Under gpu.epilogues (KernelPaths::epilogues) the biases, the GELU and their gradients are
// done by the GEMMs (linalg/gemm_epilogue.hpp); a projection whose LoRA adapter runs keeps
// the separate kernels, since the adapter's output joins the GEMM's before the bias / GELU.
// A row-parallel projection's bias then goes into tp rank 0's partial sum, before the
// all-reduce that adds the other ranks' (the bias is replicated; each rank still computes
// its whole gradient, the column sums of the replicated dx).
#include <cmath>

#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/norms.hpp"
#include "kernels/residual_norms.hpp"
#include "linalg/gemm.hpp"
#include "linalg/gemm_epilogue.hpp"
#include "model/transformer.hpp"

namespace meshtrain::model {

using linalg::Epilogue;
using linalg::Op;

namespace {

template <class T>
linalg::EpilogueOperands<T> bias_operand(const T* bias) {
  linalg::EpilogueOperands<T> x;
  x.bias = bias;
  return x;
}
/// A bias gradient (acc_t<T>, like every parameter gradient) as an epilogue operand.
template <class T>
linalg::EpilogueOperands<T> bias_grad_operand(acc_t<T>* bias_grad) {
  linalg::EpilogueOperands<T> x;
  x.bias_grad = bias_grad;
  return x;
}

}  // namespace

template <class T>
void Transformer<T>::gpt2_forward(const ComputeContext& ctx, const T* p, BatchShape s, const T* x_in, T* x_out,
                                  BlockCache<T>& c, const KvSlot* kv) const {
  const int N = s.N(), C = dims_.d_model, hd = dims_.head_dim;
  const int Hl = tp_.heads, Cl = Hl * hd, Fl = tp_.ffn, W3 = qkv_width_;  // W3 = 3*Cl
  const auto n = [](std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); };
  const auto* o = block_off_.data();
  const bool epi = paths_.epilogues;
  const auto lora_runs = [&](int t) { return has_lora(t) && !ctx.adapters_off; };

  c.norm1 = Buffer<T>(n(N, C), MemCategory::Activations);
  c.mean1 = Buffer<acc_t<T>>(N, MemCategory::Activations);
  c.rstd1 = Buffer<acc_t<T>>(N, MemCategory::Activations);
  kernels::layernorm_forward(x_in, p + o[G_LN1_W], p + o[G_LN1_B], dims_.norm_eps, N, C, c.norm1.data(),
                             c.mean1.data(), c.rstd1.data(), paths_.norm_form, paths_.row_packs);
  // qkv (N, 3Cl) = norm1 (N, C) @ c_attn (C, 3Cl) + bias
  c.qkv = Buffer<T>(n(N, W3), MemCategory::Activations);
  if (epi && !lora_runs(GL_ATTN)) {
    linalg::gemm_epilogue<T>(Epilogue::Bias, Op::N, Op::N, N, W3, C, 1.0f, c.norm1.data(), C, p + o[G_ATTN_W], W3,
                             0.0f, c.qkv.data(), W3, bias_operand(p + o[G_ATTN_B]));
  } else {
    linalg::gemm<T>(Op::N, Op::N, N, W3, C, 1.0f, c.norm1.data(), C, p + o[G_ATTN_W], W3, 0.0f, c.qkv.data(), W3);
    lora_fwd(ctx, GL_ATTN, p, c, N, c.norm1.data(), C, c.qkv.data(), W3);
    kernels::add_bias(c.qkv.data(), p + o[G_ATTN_B], N, W3, W3);
  }
  ctx.poll();

  const kernels::AttentionShape as = attention_shape(dims_, tp_, s, ctx.attention);
  c.attn_out = Buffer<T>(n(N, Cl), MemCategory::Activations);
  if (kv) {
    // Generation: append this chunk's k|v to the cache, attend over every cached position.
    kernels::kv_cache_write(as, kv->pos0, kv->T_max, c.qkv.data() + Cl, W3, c.qkv.data() + 2 * Cl, W3, kv->k, kv->v);
    Buffer<T> scores(n(static_cast<std::int64_t>(s.B) * Hl * s.T, kv->pos0 + s.T), MemCategory::Workspace);
    kernels::attention_forward_cached(as, kv->pos0, kv->T_max, c.qkv.data(), W3, kv->k, kv->v, c.attn_out.data(), Cl,
                                      scores.data());
  } else {
    c.attn_stats = Buffer<acc_t<T>>(n(static_cast<std::int64_t>(s.B) * Hl * s.T, 2), MemCategory::Activations);
    Buffer<T> work(kernels::attention_workspace_elems(as), MemCategory::Workspace);
    kernels::attention_forward(as, c.qkv.data(), W3, c.qkv.data() + Cl, W3, c.qkv.data() + 2 * Cl, W3,
                               c.attn_out.data(), Cl, c.attn_stats.data(), work.data());
  }
  ctx.poll();

  // x_mid (N, C) = attn_out (N, Cl) @ c_proj (Cl, C)  -> sum over tp, + bias, + x_in
  c.x_mid = Buffer<T>(n(N, C), MemCategory::Activations);
  // The bias: in the GEMM (gpu.epilogues), else in the fused norm kernel or add_bias below.
  const bool proj_bias_in_gemm = epi && !paths_.fused_norms && !lora_runs(GL_PROJ);
  if (proj_bias_in_gemm && tp_.rank == 0)
    linalg::gemm_epilogue<T>(Epilogue::Bias, Op::N, Op::N, N, C, Cl, 1.0f, c.attn_out.data(), Cl, p + o[G_PROJ_W], C,
                             0.0f, c.x_mid.data(), C, bias_operand(p + o[G_PROJ_B]));
  else
    linalg::gemm<T>(Op::N, Op::N, N, C, Cl, 1.0f, c.attn_out.data(), Cl, p + o[G_PROJ_W], C, 0.0f, c.x_mid.data(), C);
  lora_fwd(ctx, GL_PROJ, p, c, N, c.attn_out.data(), Cl, c.x_mid.data(), C);
  ctx.tp_all_reduce(c.x_mid.data(), n(N, C));
  c.norm2 = Buffer<T>(n(N, C), MemCategory::Activations);
  c.mean2 = Buffer<acc_t<T>>(N, MemCategory::Activations);
  c.rstd2 = Buffer<acc_t<T>>(N, MemCategory::Activations);
  if (paths_.fused_norms) {
    // x_mid += bias + x_in and norm2 = ln_2(x_mid) in one kernel.
    kernels::residual_layernorm_forward(c.x_mid.data(), x_in, p + o[G_PROJ_B], p + o[G_LN2_W], p + o[G_LN2_B],
                                        dims_.norm_eps, N, C, c.norm2.data(), c.mean2.data(), c.rstd2.data(),
                                        paths_.norm_form, paths_.row_packs);
  } else {
    if (!proj_bias_in_gemm) kernels::add_bias(c.x_mid.data(), p + o[G_PROJ_B], N, C, C);
    kernels::add_inplace(c.x_mid.data(), x_in, n(N, C));
    kernels::layernorm_forward(c.x_mid.data(), p + o[G_LN2_W], p + o[G_LN2_B], dims_.norm_eps, N, C, c.norm2.data(),
                               c.mean2.data(), c.rstd2.data(), paths_.norm_form, paths_.row_packs);
  }
  ctx.poll();
  // h (N, Fl) = norm2 @ c_fc (C, Fl) + bias; act = gelu(h)
  c.mlp_in = Buffer<T>(n(N, Fl), MemCategory::Activations);
  c.mlp_act = Buffer<T>(n(N, Fl), MemCategory::Activations);
  if (epi && !lora_runs(GL_FC)) {
    // mlp_in = the GEMM + bias (the pre-activation backward needs), mlp_act = gelu(mlp_in).
    linalg::EpilogueOperands<T> x = bias_operand(p + o[G_FC_B]);
    x.pre = c.mlp_in.data();
    x.ld_pre = Fl;
    linalg::gemm_epilogue<T>(Epilogue::BiasGelu, Op::N, Op::N, N, Fl, C, 1.0f, c.norm2.data(), C, p + o[G_FC_W], Fl,
                             0.0f, c.mlp_act.data(), Fl, x);
  } else {
    linalg::gemm<T>(Op::N, Op::N, N, Fl, C, 1.0f, c.norm2.data(), C, p + o[G_FC_W], Fl, 0.0f, c.mlp_in.data(), Fl);
    lora_fwd(ctx, GL_FC, p, c, N, c.norm2.data(), C, c.mlp_in.data(), Fl);
    kernels::add_bias(c.mlp_in.data(), p + o[G_FC_B], N, Fl, Fl);
    kernels::gelu_forward(c.mlp_in.data(), c.mlp_act.data(), n(N, Fl));
  }
  ctx.poll();
  // x_out (N, C) = act (N, Fl) @ mlp.c_proj (Fl, C) -> sum over tp, + bias, + x_mid
  const bool fcproj_bias_in_gemm = epi && !lora_runs(GL_MLPPROJ);
  if (fcproj_bias_in_gemm && tp_.rank == 0)
    linalg::gemm_epilogue<T>(Epilogue::Bias, Op::N, Op::N, N, C, Fl, 1.0f, c.mlp_act.data(), Fl, p + o[G_FCPROJ_W], C,
                             0.0f, x_out, C, bias_operand(p + o[G_FCPROJ_B]));
  else
    linalg::gemm<T>(Op::N, Op::N, N, C, Fl, 1.0f, c.mlp_act.data(), Fl, p + o[G_FCPROJ_W], C, 0.0f, x_out, C);
  lora_fwd(ctx, GL_MLPPROJ, p, c, N, c.mlp_act.data(), Fl, x_out, C);
  ctx.tp_all_reduce(x_out, n(N, C));
  if (!fcproj_bias_in_gemm) kernels::add_bias(x_out, p + o[G_FCPROJ_B], N, C, C);
  kernels::add_inplace(x_out, c.x_mid.data(), n(N, C));
  ctx.poll();
}

template <class T>
void Transformer<T>::gpt2_backward(const ComputeContext& ctx, const T* p, acc_t<T>* g, BatchShape s, const T* x_in,
                                   BlockCache<T>& c, T* dx) const {
  const int N = s.N(), C = dims_.d_model, hd = dims_.head_dim;
  const int Hl = tp_.heads, Cl = Hl * hd, Fl = tp_.ffn, W3 = qkv_width_;
  const auto n = [](std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); };
  const auto* o = block_off_.data();
  const bool epi = paths_.epilogues;

  // ---- MLP: dx is dL/dx_out = dL/d(mlp out) -------------------------------------------
  // d c_proj (Fl, C) += act^T (Fl, N) @ dx (N, C), d c_proj bias += column sums of dx
  // (both skipped for a frozen base under LoRA: base_grad is then null).
  if (epi) {
    if (train_base_)
      linalg::gemm_epilogue<T>(Epilogue::BiasGradB, Op::T, Op::N, Fl, C, N, 1.0f, c.mlp_act.data(), Fl, dx, C, 1.0f,
                               g + o[G_FCPROJ_W], C, bias_grad_operand<T>(g + o[G_FCPROJ_B]));
  } else {
    kernels::bias_backward(dx, base_grad(g, o[G_FCPROJ_B]), N, C, C);
    if (train_base_)
      linalg::gemm_acc<T>(Op::T, Op::N, Fl, C, N, 1.0f, c.mlp_act.data(), Fl, dx, C, 1.0f, g + o[G_FCPROJ_W], C);
  }
  ctx.poll();
  // dh (N, Fl) = (dx (N, C) @ c_proj^T (C, Fl)) * gelu'(mlp_in), d c_fc bias += column sums of dh
  Buffer<T> dh(n(N, Fl), MemCategory::Workspace);
  if (epi && !has_lora(GL_MLPPROJ)) {
    linalg::EpilogueOperands<T> x = bias_grad_operand<T>(base_grad(g, o[G_FC_B]));
    x.pre = c.mlp_in.data();
    x.ld_pre = Fl;
    linalg::gemm_epilogue<T>(Epilogue::DGeluBiasGrad, Op::N, Op::T, N, Fl, C, 1.0f, dx, C, p + o[G_FCPROJ_W], C, 0.0f,
                             dh.data(), Fl, x);
  } else {
    linalg::gemm<T>(Op::N, Op::T, N, Fl, C, 1.0f, dx, C, p + o[G_FCPROJ_W], C, 0.0f, dh.data(), Fl);
    lora_bwd(GL_MLPPROJ, p, g, c, N, c.mlp_act.data(), Fl, dx, C, dh.data(), Fl);
    kernels::gelu_backward(c.mlp_in.data(), dh.data(), dh.data(), n(N, Fl));
    kernels::bias_backward(dh.data(), base_grad(g, o[G_FC_B]), N, Fl, Fl);
  }
  ctx.poll();
  // d c_fc (C, Fl) += norm2^T (C, N) @ dh (N, Fl)
  if (train_base_)
    linalg::gemm_acc<T>(Op::T, Op::N, C, Fl, N, 1.0f, c.norm2.data(), C, dh.data(), Fl, 1.0f, g + o[G_FC_W], Fl);
  ctx.poll();
  // dnorm2 (N, C) = dh (N, Fl) @ c_fc^T (Fl, C): partial over tp
  Buffer<T> dnorm(n(N, C), MemCategory::Workspace);
  linalg::gemm<T>(Op::N, Op::T, N, C, Fl, 1.0f, dh.data(), Fl, p + o[G_FC_W], Fl, 0.0f, dnorm.data(), C);
  lora_bwd(GL_FC, p, g, c, N, c.norm2.data(), C, dh.data(), Fl, dnorm.data(), C);
  dh.reset();
  ctx.tp_all_reduce(dnorm.data(), n(N, C));
  if (paths_.fused_norms) {
    // dx += ln_2's input gradient; d ln_2, and d c_proj bias = column sums of the new dx, in the same pass.
    kernels::residual_layernorm_backward(dnorm.data(), c.x_mid.data(), p + o[G_LN2_W], c.mean2.data(), c.rstd2.data(),
                                         N, C, dx, base_grad(g, o[G_LN2_W]), base_grad(g, o[G_LN2_B]),
                                         base_grad(g, o[G_PROJ_B]), paths_.norm_form, paths_.row_packs);
  } else {
    kernels::layernorm_backward(dnorm.data(), c.x_mid.data(), p + o[G_LN2_W], c.mean2.data(), c.rstd2.data(), N, C,
                                dx, base_grad(g, o[G_LN2_W]), base_grad(g, o[G_LN2_B]), paths_.norm_form,
                                paths_.row_packs);
    if (!epi) kernels::bias_backward(dx, base_grad(g, o[G_PROJ_B]), N, C, C);
  }
  ctx.poll();

  // ---- attention: dx is now dL/dx_mid ---------------------------------------------------
  // d c_proj (Cl, C) += attn_out^T (Cl, N) @ dx (N, C); with gpu.epilogues and the unfused
  // norms, d c_proj bias += column sums of dx in the same GEMM.
  if (train_base_) {
    if (epi && !paths_.fused_norms)
      linalg::gemm_epilogue<T>(Epilogue::BiasGradB, Op::T, Op::N, Cl, C, N, 1.0f, c.attn_out.data(), Cl, dx, C, 1.0f,
                               g + o[G_PROJ_W], C, bias_grad_operand<T>(g + o[G_PROJ_B]));
    else
      linalg::gemm_acc<T>(Op::T, Op::N, Cl, C, N, 1.0f, c.attn_out.data(), Cl, dx, C, 1.0f, g + o[G_PROJ_W], C);
  }
  Buffer<T> dy(n(N, Cl), MemCategory::Workspace);
  linalg::gemm<T>(Op::N, Op::T, N, Cl, C, 1.0f, dx, C, p + o[G_PROJ_W], C, 0.0f, dy.data(), Cl);
  lora_bwd(GL_PROJ, p, g, c, N, c.attn_out.data(), Cl, dx, C, dy.data(), Cl);
  ctx.poll();
  const kernels::AttentionShape as = attention_shape(dims_, tp_, s, ctx.attention);
  Buffer<T> dqkv(n(N, W3), MemCategory::Workspace);
  {
    Buffer<T> work(kernels::attention_workspace_elems(as), MemCategory::Workspace);
    kernels::attention_backward(as, c.qkv.data(), W3, c.qkv.data() + Cl, W3, c.qkv.data() + 2 * Cl, W3,
                                c.attn_out.data(), c.attn_stats.data(), dy.data(), Cl, dqkv.data(), dqkv.data() + Cl, dqkv.data() + 2 * Cl,
                                work.data());
  }
  dy.reset();
  ctx.poll();
  // d c_attn (C, 3Cl) += norm1^T (C, N) @ dqkv (N, 3Cl), d c_attn bias += column sums of dqkv
  if (epi) {
    if (train_base_)
      linalg::gemm_epilogue<T>(Epilogue::BiasGradB, Op::T, Op::N, C, W3, N, 1.0f, c.norm1.data(), C, dqkv.data(), W3,
                               1.0f, g + o[G_ATTN_W], W3, bias_grad_operand<T>(g + o[G_ATTN_B]));
  } else {
    kernels::bias_backward(dqkv.data(), base_grad(g, o[G_ATTN_B]), N, W3, W3);
    if (train_base_)
      linalg::gemm_acc<T>(Op::T, Op::N, C, W3, N, 1.0f, c.norm1.data(), C, dqkv.data(), W3, 1.0f, g + o[G_ATTN_W], W3);
  }
  ctx.poll();
  // dnorm1 (N, C) = dqkv (N, 3Cl) @ c_attn^T (3Cl, C): partial over tp
  linalg::gemm<T>(Op::N, Op::T, N, C, W3, 1.0f, dqkv.data(), W3, p + o[G_ATTN_W], W3, 0.0f, dnorm.data(), C);
  lora_bwd(GL_ATTN, p, g, c, N, c.norm1.data(), C, dqkv.data(), W3, dnorm.data(), C);
  ctx.tp_all_reduce(dnorm.data(), n(N, C));
  kernels::layernorm_backward(dnorm.data(), x_in, p + o[G_LN1_W], c.mean1.data(), c.rstd1.data(), N, C, dx,
                              base_grad(g, o[G_LN1_W]), base_grad(g, o[G_LN1_B]), paths_.norm_form, paths_.row_packs);
  ctx.poll();
}

#define MESHTRAIN_INSTANTIATE(T)                                                                          \
  template void Transformer<T>::gpt2_forward(const ComputeContext&, const T*, BatchShape, const T*, T*,   \
                                             BlockCache<T>&, const KvSlot*) const;                        \
  template void Transformer<T>::gpt2_backward(const ComputeContext&, const T*, acc_t<T>*, BatchShape,     \
                                              const T*, BlockCache<T>&, T*) const;
MESHTRAIN_INSTANTIATE(float)
MESHTRAIN_INSTANTIATE(double)
MESHTRAIN_INSTANTIATE(bf16)
#undef MESHTRAIN_INSTANTIATE

}  // namespace meshtrain::model
