#include "plan/planner.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/format.hpp"
#include "kernels/attention.hpp"
#include "model/layout.hpp"
#include "model/transformer.hpp"
#include "parallel/gguf_base.hpp"
#include "parallel/quantized_base.hpp"
#include "parallel/reduction_plan.hpp"

namespace meshtrain::plan {
namespace {

// Names: `slice` is this tp rank's share of the model (model::TpDims), `B` the micro-batch
// and `seq` the sequence length (windows x tokens), N = B x seq the rows of a micro-step,
// C = d_model; `elem_bytes` is the compute dtype's size.

/// Saved activations of one block for one micro-batch (elements of `elem_bytes` bytes),
/// mirroring BlockCache. The attention keeps per query row its softmax statistics (two
/// fp32 values), not the (seq, seq) probabilities.
double block_activation_elems(const model::ModelDims& d, const model::TpDims& slice, int B, int seq, double elem_bytes) {
  const double N = static_cast<double>(B) * seq, C = d.d_model, hd = d.head_dim;
  const double W = d.family == model::Family::Gpt2 ? 3.0 * slice.heads * hd : (slice.heads + 2.0 * slice.kv_heads) * hd;
  const double mlp_in = d.family == model::Family::Gpt2 ? slice.ffn : 2.0 * slice.ffn;
  return N * C * 3 /*norm1, x_mid, norm2*/ + N * W + N * slice.heads * 2.0 * 4.0 / elem_bytes /*attn_stats*/ +
         N * slice.heads * hd /*attn_out*/ + N * mlp_in + N * slice.ffn /*act*/;
}

/// Elements the attention's score strips pass through in one block's forward: the (seq,
/// seq) scores and probabilities of every head, written and read one strip at a time.
double block_attention_score_elems(const model::TpDims& slice, int B, int seq) {
  return static_cast<double>(B) * slice.heads * seq * seq;
}

/// The attention's two score strips (elements; kernels::attention_workspace_elems), `rows`
/// query rows tall (0: this build's kernels::attention_block_rows).
double attention_strips_elems(int B, int seq, int rows) {
  return 2.0 * B * (rows > 0 ? rows : kernels::attention_block_rows(seq)) * static_cast<double>(seq);
}

/// Largest backward scratch of a block (elements): dqkv + the attention's two score strips
/// + dy, or the MLP's; + dnorm.
double block_backward_scratch_elems(const model::ModelDims& d, const model::TpDims& slice, int B, int seq, int rows) {
  const double N = static_cast<double>(B) * seq, C = d.d_model, hd = d.head_dim;
  const double W = d.family == model::Family::Gpt2 ? 3.0 * slice.heads * hd : (slice.heads + 2.0 * slice.kv_heads) * hd;
  const double mlp = d.family == model::Family::Gpt2 ? slice.ffn : 2.0 * slice.ffn;
  const double strips = attention_strips_elems(B, seq, rows);
  return std::max(N * W + strips + N * slice.heads * hd, N * mlp + N * slice.ffn) + N * C;
}

/// The LM head's logits chunk (elements): kHeadChunkElements at most, whole rows, at most
/// the N rows of the micro-batch (model::Transformer::head_chunk_rows).
double head_chunk_elems(const model::TpDims& slice, double N) {
  const double rows = std::min(N, std::max(1.0, static_cast<double>(model::kHeadChunkElements) / slice.vocab));
  return rows * slice.vocab;
}

/// generate's KV cache (elements, model::KvCache): keys and values of every layer, B
/// sequences x `positions` x this tp rank's kv heads (GPT-2: its heads) x head_dim.
double kv_cache_elems(const model::ModelDims& d, const model::TpDims& slice, int B, int positions) {
  const double kv_heads = d.family == model::Family::Gpt2 ? slice.heads : slice.kv_heads;
  return 2.0 * d.n_layers * B * static_cast<double>(positions) * kv_heads * d.head_dim;
}

/// Largest forward scratch of a block run without keeping its activations (elements): qkv and
/// the attention output, or the MLP's input projections; + the normed input. DPO's reference
/// blocks (forward only, beside the policy's kept activations) hold this at their peak.
double block_forward_scratch_elems(const model::ModelDims& d, const model::TpDims& slice, int B, int seq) {
  const double N = static_cast<double>(B) * seq, C = d.d_model, hd = d.head_dim;
  const double W = d.family == model::Family::Gpt2 ? 3.0 * slice.heads * hd : (slice.heads + 2.0 * slice.kv_heads) * hd;
  const double mlp_in = d.family == model::Family::Gpt2 ? slice.ffn : 2.0 * slice.ffn;
  return std::max(N * W + N * slice.heads * hd, N * mlp_in) + N * C;
}

/// What the units of one strategy on one mesh add up to, in elements (per rank where
/// sharded): the whole units (what is gathered) and their trainable segments (what has fp32
/// master, gradients and moments, and is reduced); they differ under LoRA only, where the
/// frozen base is held in the compute dtype (model::UnitLayout).
struct UnitTotals {
  double state = 0, frozen = 0;           ///< this rank's trainable / frozen elements (its shard, or all unsharded)
  double all_padded = 0, all_trainable = 0;
  double outer = 0, outer_trainable = 0;  ///< the outer unit (embeddings, final norm, head)
  double max_block = 0, max_block_trainable = 0;
  double max_state = 0;                   ///< the most trainable elements this rank holds of one unit
  int reduced_units = 0;                  ///< units with a trainable segment
};

/// Bytes of unit L's frozen segment on the wire of one all-gather (every shard's) and, per
/// rank, at rest: in the compute dtype, or quantized as FsdpEngine keeps it.
struct FrozenBytes {
  double wire = 0;        ///< the gathered frozen segment: S x what each rank sends
  double persistent = 0;  ///< this rank's (sharded: its shard; no_shard: the gathered copy holds it)
};

/// True when the outer unit's frozen segment is kept quantized through the step
/// (FsdpEngine::outer_kept_quantized, every strategy): no compute-dtype copy of it exists.
bool outer_kept_quantized(const PlanInput& in) {
  return parallel::unit_base_quant(in.dims.base_quant, in.dims.base_quant_embeddings, 0) != BaseQuant::None;
}

FrozenBytes frozen_bytes(const PlanInput& in, const std::vector<model::ParamSpec>& specs, const model::UnitLayout& L,
                         int tp, bool sharded) {
  const double elem_bytes = in.bf16 ? 2.0 : 4.0;
  FrozenBytes f;
  if (L.frozen_padded() == 0) return f;
  const BaseQuant quant = parallel::unit_base_quant(in.dims.base_quant, in.dims.base_quant_embeddings, L.unit);
  if (quant == BaseQuant::None) {
    f.wire = elem_bytes * static_cast<double>(L.frozen_padded());
    f.persistent = sharded ? elem_bytes * static_cast<double>(L.frozen_shard_numel) : 0.0;
    return f;
  }
  if (quant == BaseQuant::Gguf) {
    // The GGUF base's blocks as the engine keeps them (parallel/gguf_base.hpp): every shard
    // sends the largest shard's bytes; the runs table, the shard and the 1-D parameters in T
    // (sharded, or no_shard's outer unit, kept in blocks: its one shard, the whole segment).
    const parallel::GgufMap map = parallel::build_gguf_map(specs, L, tp, 0, in.dims.base_formats);
    f.wire = static_cast<double>(map.stride) * L.shards;
    f.persistent = static_cast<double>(map.runs.size() * sizeof(kernels::GgufRun));
    if (sharded || L.unit == 0)
      f.persistent += static_cast<double>(map.stride) + elem_bytes * static_cast<double>(map.dense_numel());
    return f;
  }
  // tp rank 0's map: every tp rank's runs and tables have the same sizes up to a few runs.
  const parallel::QuantMap map = parallel::build_quant_map(specs, L, tp, 0, quant);
  const double payload = static_cast<double>(parallel::payload_bytes(quant, L.frozen_shard_numel));
  f.wire = payload * L.shards;
  f.persistent = static_cast<double>(map.runs.size() * sizeof(kernels::QuantRun)) + 4.0 * static_cast<double>(map.groups);
  // Sharded: this rank's payload and the 1-D parameters; no_shard's outer unit, kept
  // quantized, holds the whole payload (its one shard) and them too.
  if (sharded || L.unit == 0) f.persistent += payload + elem_bytes * static_cast<double>(map.dense_numel());
  return f;
}

/// Whether a quantized LoRA base (model.base_quant) splits over `tp`: every tensor-parallel
/// slice of a frozen matrix covers whole quantization blocks (GGUF: the file's blocks), as
/// the engine's maps need (parallel::build_quant_map, build_gguf_map; tp rank 0's, as
/// frozen_bytes builds). True without a quantized base.
bool base_splits_over(const PlanInput& in, int tp) {
  if (in.dims.base_quant == BaseQuant::None) return true;
  const auto specs = model::build_param_specs(in.dims, tp);
  try {
    for (const model::UnitLayout& L : model::build_layouts(specs, model::num_units(in.dims), tp, 1))
      frozen_bytes(in, specs, L, tp, true);
  } catch (const UserError&) {
    return false;
  }
  return true;
}

UnitTotals unit_totals(const std::vector<model::UnitLayout>& layouts, bool sharded) {
  UnitTotals u;
  for (const auto& L : layouts) {
    u.state += sharded ? L.shard_numel : L.trainable_padded();
    u.max_state = std::max(u.max_state, static_cast<double>(sharded ? L.shard_numel : L.trainable_padded()));
    u.frozen += sharded ? L.frozen_shard_numel : L.frozen_padded();
    u.all_padded += L.padded();
    u.all_trainable += L.trainable_padded();
    u.reduced_units += L.trainable_padded() > 0 ? 1 : 0;
    if (L.unit == 0) {
      u.outer = static_cast<double>(L.padded());
      u.outer_trainable = static_cast<double>(L.trainable_padded());
    } else {
      u.max_block = std::max(u.max_block, static_cast<double>(L.padded()));
      u.max_block_trainable = std::max(u.max_block_trainable, static_cast<double>(L.trainable_padded()));
    }
  }
  return u;
}

/// Transient parameter copies in the compute dtype, gradient buffers and communication
/// buffers (bytes per rank) of `s` with `grad_accum` micro-steps.
void transient_memory(const PlanInput& in, parallel::Strategy s, const std::vector<model::UnitLayout>& layouts,
                      const std::vector<FrozenBytes>& frozen_units, const UnitTotals& u, int grad_accum,
                      MemoryEstimate& m) {
  const parallel::StrategyTraits tr = parallel::traits(s);
  const double elem_bytes = in.bf16 ? 2.0 : 4.0;
  const bool frozen = u.frozen > 0;
  const int alive_blocks = std::min(in.dims.n_layers, 1 + in.prefetch);
  // The outer unit as gathered: in T, or kept quantized -- its gathered payload (sharded) or
  // nothing beside the persistent payload (no_shard).
  const bool kept = outer_kept_quantized(in) && frozen;
  const double outer_t = elem_bytes * u.outer;
  const double outer_gathered = kept ? frozen_units[0].wire : outer_t;
  if (s == parallel::Strategy::NoShard) m.gathered = (in.bf16 || frozen) ? elem_bytes * u.all_padded - (kept ? outer_t : 0.0) : 0.0;
  else if (s == parallel::Strategy::ShardGradOp) m.gathered = elem_bytes * u.all_padded - outer_t + outer_gathered;  // kept from forward to backward
  else m.gathered = outer_gathered + elem_bytes * alive_blocks * u.max_block;
  // A forward-only engine (eval, generate) gathers as a training forward does, but has no
  // gradient, reduction or staging buffer at all.
  if (in.forward_only()) return;
  // Gradient and communication buffers: which exist, in which dtype, and how long they
  // live is the engine's reduction recipe (parallel/reduction_plan.hpp), the same one
  // FsdpEngine interprets. All of them cover trainable segments only.
  const parallel::ReductionPlan rp = parallel::reduction_plan(tr, in.bf16 ? DType::BF16 : DType::F32, in.reduce_dtype);
  const parallel::ReductionRecipe& rc = rp.first;  // the backward's buffers are the same every micro-step
  // Units whose buffers live together while reductions are in flight: the outer unit's
  // (its gradients grow through the whole backward, reduced last), the block whose
  // reduction is in flight and the block computing.
  const double in_flight = u.outer_trainable + 2 * u.max_block_trainable;
  const double micro_b = static_cast<double>(rc.micro_grads_elem_bytes());
  const double accum_b = static_cast<double>(rc.local_accum_elem_bytes());
  // The fp32 local accumulation of every unit lives across micro-steps (no communication
  // until the last); with one micro-step each unit's is reduced right after its backward.
  // The micro-step buffers (fp32 gradients, strategies reducing every micro-step) are sent
  // or cast per micro-step; the accumulating strategies have none (micro_b = 0).
  m.grad_buffers = accum_b * (grad_accum > 1 ? u.all_trainable : in_flight);
  m.grad_buffers += micro_b * in_flight;
  // Communication buffers: the staging copies of the recipes (ReductionRecipe::
  // comm_buffer_bytes) of the reductions the engine holds at once - the one just started
  // and the one before it (FsdpEngine::launch_reduction completes older ones) - over the
  // backward's unit order, for micro-step 0's recipe and the later ones. The same walk as
  // the engine's, so the figure is its allocation exactly (test_memory_accounting).
  // Strategies that accumulate locally reduce on the last micro-step only; the others on
  // every one, where the third and later repeat the second (same recipe, same predecessor).
  double peak = 0, previous = 0;
  const auto walk = [&](const parallel::ReductionRecipe& r) {
    for (int i = static_cast<int>(layouts.size()) - 1; i >= 0; --i) {
      const model::UnitLayout& L = layouts[i];
      if (L.trainable_padded() == 0) continue;
      const double b = static_cast<double>(r.comm_buffer_bytes(L.trainable_padded(), L.shard_numel));
      peak = std::max(peak, previous + b);
      previous = b;
    }
  };
  if (tr.reduce_every_micro) {
    for (int micro = 0; micro < std::min(grad_accum, 3); ++micro) walk(rp.at(micro == 0));
  } else {
    walk(rp.at(grad_accum == 1));
  }
  m.comm_buffers = peak;
}

/// Activations of one micro-step (bytes): the residual stream at every block boundary, the
/// saved activations (one block's with checkpointing), the largest backward scratch, the
/// head's chunk and DPO's reference stream. Also, in `traffic`, the bytes its forward writes
/// whether kept or recomputed (StrategyPlan::activation_traffic), and in `score_traffic` the
/// attention scores' part of them (StrategyPlan::attention_score_traffic).
double activation_memory(const PlanInput& in, const model::TpDims& slice, double& traffic, double& score_traffic) {
  const double elem_bytes = in.bf16 ? 2.0 : 4.0;
  const int B = in.batch.micro_batch, seq = in.batch.seq_len;
  const double N = static_cast<double>(B) * seq, C = in.dims.d_model;
  const double per_block = block_activation_elems(in.dims, slice, B, seq, elem_bytes);
  const double layers = in.dims.n_layers;
  double act = (layers + 2) * N * C;  // residual stream at every block boundary + dx
  act += in.activation_checkpointing ? per_block : layers * per_block;
  act += block_backward_scratch_elems(in.dims, slice, B, seq, in.attention_rows);
  act += head_chunk_elems(slice, N) + 2 * N * C;  // head: logits chunk, normed, dnormed
  // DPO with its reference computed in the step (LoRA: adapters off) runs the reference's
  // residual stream, two (N, C) buffers, and each reference block's forward scratch beside
  // the policy's forward (parallel/micro_step.cpp). Without checkpointing that is on top of
  // every kept activation and raises the peak; with it the backward's peak stays higher.
  // Measured peaks (tiny-llama, LoRA, seq 256): micro-batch 8 24.18 MiB (SFT 21.61) against
  // 25.26 predicted, micro-batch 4 12.52 against 12.91; with checkpointing 14.80 (SFT 14.79).
  if (in.dpo && !in.simpo && in.dims.lora_rank > 0 && !in.activation_checkpointing)
    act += 2 * N * C + block_forward_scratch_elems(in.dims, slice, B, seq);
  // The checkpointed blocks write theirs again in the recomputation; the cost model adds that pass.
  score_traffic = elem_bytes * layers * block_attention_score_elems(slice, B, seq);
  traffic = elem_bytes * ((layers + 2) * N * C + layers * per_block + N * slice.vocab + 2 * N * C) +  // head: every logit once
            score_traffic;
  return elem_bytes * act;
}

/// Activations of a forward pass alone (eval, generate; bytes): nothing is kept for a
/// backward, so one block's worth is alive at a time (parallel/micro_step.cpp:
/// forward_to_last) -- the residual stream in and out of the block, and the block's own
/// activations (BlockCache, dropped on return) with the attention's scratch; after the last
/// block, the head's normed rows and logits chunk. Plus generate's KV cache, which lives
/// through every step.
double forward_activation_memory(const PlanInput& in, const model::TpDims& slice) {
  const double elem_bytes = in.bf16 ? 2.0 : 4.0;
  const int B = in.batch.micro_batch, seq = in.batch.seq_len;
  const double N = static_cast<double>(B) * seq, C = in.dims.d_model;
  // Against a KV cache the attention writes every head's scores of the fed tokens against
  // the cached and fed positions at once (the prompt: seq x seq), not strips.
  const double attention = in.kv_cache_positions > 0 ? block_attention_score_elems(slice, B, seq)
                                                      : attention_strips_elems(B, seq, in.attention_rows);
  const double block = block_activation_elems(in.dims, slice, B, seq, elem_bytes) + attention;
  const double head = N * C + head_chunk_elems(slice, N);
  double act = 2 * N * C + std::max(block, head);
  if (in.kv_cache_positions > 0) act += kv_cache_elems(in.dims, slice, B, in.kv_cache_positions);
  // Llama's RoPE tables (model::Transformer: cos and sin, fp32, max_seq_len x head_dim / 2)
  // live beside them: small, but without them a short eval's peak (SmolLM2, one window of
  // 64) was 0.1 MiB above the plan. (The training plan's larger transients cover them.)
  const double rope = in.dims.family == model::Family::Gpt2 ? 0.0 : 2.0 * in.dims.max_seq_len * (in.dims.head_dim / 2);
  return elem_bytes * act + 4.0 * rope;
}

/// Communication of one optimizer step of `s` on `shape` with `grad_accum` micro-steps
/// (bytes per rank on the wire and collective counts). For eval and generate
/// (in.forward_only()) of one forward pass (PlanInput::forward_tokens): its gathers
/// once each (nothing re-gathers, nothing is reduced or replicated) and tensor parallelism's
/// forward all-reduces.
CommVolume step_communication(const PlanInput& in, parallel::Strategy s, const MeshShape& shape,
                              const std::vector<model::UnitLayout>& layouts, const std::vector<FrozenBytes>& frozen,
                              const UnitTotals& u, int grad_accum) {
  const parallel::StrategyTraits tr = parallel::traits(s);
  const double elem_bytes = in.bf16 ? 2.0 : 4.0;
  const double wire_bytes = in.reduce_dtype == DType::BF16 ? 2.0 : 4.0;
  CommVolume c;
  const bool fwd = in.forward_only();
  const int A = fwd ? 1 : grad_accum, dp = shape.dp();
  const double S = shape.dp_shard;
  double gathered_bytes = 0, reduced_bytes = 0, frozen_bytes = 0;
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const model::UnitLayout& L = layouts[i];
    // gathered: the frozen segment (in T or quantized) and the trainable one in T
    gathered_bytes += frozen[i].wire + elem_bytes * L.trainable_padded();
    frozen_bytes += frozen[i].wire;
    reduced_bytes += wire_bytes * L.trainable_padded();  // reduced: trainable only
  }
  const double outer_bytes = frozen[0].wire + elem_bytes * layouts[0].trainable_padded();
  const double block_bytes = gathered_bytes - outer_bytes;
  if (tr.shard_params && S > 1) {
    // Per micro-step the outer unit is gathered once and every block once (forward), or
    // twice when it is resharded after forward (forward and backward).
    const bool regather = tr.reshard_after_forward && !fwd;  // a forward pass gathers each block once
    c.fsdp_gather = A * (S - 1) / S * (outer_bytes + (regather ? 2.0 : 1.0) * block_bytes);
    c.fsdp_gather_backward = regather ? A * (S - 1) / S * block_bytes : 0.0;
    const double frozen_blocks = frozen_bytes - frozen[0].wire;
    c.frozen_gather = A * (S - 1) / S * (frozen[0].wire + (regather ? 2.0 : 1.0) * frozen_blocks);
    c.fsdp_reduce = fwd ? 0.0 : (tr.reduce_every_micro ? A : 1) * (S - 1) / S * reduced_bytes;
    // One all-gather per non-empty segment (frozen, trainable) of a unit.
    const auto segments = [](const model::UnitLayout& L) {
      return (L.frozen_shard_numel > 0 ? 1 : 0) + (L.shard_numel > 0 ? 1 : 0);
    };
    const int block_segments = in.dims.n_layers > 0 ? segments(layouts[1]) : 0;
    c.gather_collectives = A * (segments(layouts[0]) + (regather ? 2 : 1) * in.dims.n_layers * block_segments);
    c.reduce_collectives = fwd ? 0 : (tr.reduce_every_micro ? A : 1) * u.reduced_units;
    c.fill_gather = A * (S - 1) / S * (outer_bytes + (layouts.size() > 1 ? frozen[1].wire : 0.0) +
                                       elem_bytes * u.max_block_trainable);
    c.fill_reduce = fwd ? 0.0 : (S - 1) / S * wire_bytes * u.outer_trainable;
  } else if (!tr.shard_params && dp > 1 && !fwd) {  // replicated parameters: a forward pass communicates nothing
    c.fsdp_reduce = 2.0 * (dp - 1) / dp * reduced_bytes;
    c.reduce_collectives = u.reduced_units;
    c.reduce_is_all_reduce = true;
    c.fill_reduce = 2.0 * (dp - 1) / dp * wire_bytes * u.outer_trainable;
  }
  c.fsdp_collectives = c.gather_collectives + c.reduce_collectives;
  if (tr.shard_params && shape.dp_replicate > 1 && !fwd) {
    const double Rr = shape.dp_replicate;
    c.replicate = 2.0 * (Rr - 1) / Rr * 4.0 * u.state;
    c.replicate_collectives = u.reduced_units;
  }
  if (shape.tp > 1) {
    // Per block: forward 2 (attention out, MLP out), backward 2 (norm input grads), plus the
    // recomputation's 2 with activation checkpointing; embedding 1 and head 1. A forward
    // pass: the forward's 2 per block, over its own tokens.
    const double N = fwd ? in.forward_tokens() : static_cast<double>(in.batch.micro_batch) * in.batch.seq_len;
    const double C = in.dims.d_model;
    const double layers = in.dims.n_layers;
    const double per = 2.0 * (shape.tp - 1) / shape.tp * N * C * elem_bytes;
    const double per_block_ars = fwd ? 2 : in.activation_checkpointing ? 6 : 4;
    c.tp = A * per * (per_block_ars * layers + 2);
    c.tp_collectives = static_cast<int>(A * (per_block_ars * layers + 2));
  }
  return c;
}

}  // namespace

MeshShape mesh_shape_for_strategy(const PlanInput& in, parallel::Strategy s) {
  MeshRequest request = in.mesh_request;
  if (s == parallel::Strategy::HybridShard && request.dp_replicate == 1 && request.dp_shard == -1) {
    // Shard within a node, replicate across nodes.
    const int nodes = std::max(1, in.world / std::max(1, in.ranks_per_node));
    request.dp_replicate = nodes;
  }
  return resolve_mesh_shape(request, in.world, in.ranks_per_node > 0 ? std::optional<int>(in.ranks_per_node) : std::nullopt);
}

std::vector<MeshShape> candidate_mesh_shapes(const PlanInput& in, parallel::Strategy s) {
  std::vector<MeshShape> out;
  const int world = in.world, rpn = in.ranks_per_node > 0 ? in.ranks_per_node : world;
  const auto fixed_ok = [](int want, int v) { return want == -1 || want == v; };
  for (int tp = 1; tp <= std::min(world, rpn); ++tp) {
    if (world % tp != 0 || rpn % tp != 0 || !fixed_ok(in.mesh_request.tp, tp)) continue;
    try {
      model::tp_dims(in.dims, tp, 0);  // heads, kv heads, ffn and vocabulary split evenly
    } catch (const UserError&) {
      continue;
    }
    // Nor is a tp the search is free to pick that cuts a quantized base's blocks: without
    // this, `train` with the mesh left at -1 and `plan` on 2 ranks refused tiny-llama's nf4
    // QLoRA (o_proj 64 x 64 splits into 32-weight slices at tp=2), which runs at tp=1. A
    // fixed tp stays, so plan_strategy's error names the tensor that does not split.
    if (in.mesh_request.tp == -1 && !base_splits_over(in, tp)) continue;
    const int dp = world / tp;
    for (int r = 1; r <= dp; ++r) {
      if (dp % r != 0) continue;
      const MeshShape m{r, dp / r, tp};
      if (!fixed_ok(in.mesh_request.dp_replicate, m.dp_replicate) || !fixed_ok(in.mesh_request.dp_shard, m.dp_shard)) continue;
      const bool all_in_shard = m.dp_replicate == 1;
      if ((s == parallel::Strategy::NoShard || s == parallel::Strategy::FullShard) && !all_in_shard) {
        // Only when the user fixed dp_replicate > 1 (then these run as configured).
        if (in.mesh_request.dp_replicate == -1) continue;
      }
      if (s == parallel::Strategy::HybridShard && (m.dp_replicate == 1 || m.dp_shard == 1)) continue;
      out.push_back(m);
    }
  }
  return out;
}

StrategyPlan plan_strategy(const PlanInput& in, parallel::Strategy s, const MeshShape& shape) {
  StrategyPlan p;
  p.strategy = s;
  p.mesh_shape = shape;
  // A forward pass keeps nothing to recompute: checkpointing means nothing to eval or generate.
  p.activation_checkpointing = in.activation_checkpointing && !in.forward_only();
  // 1. The units as the engine lays them out for this tp and shard count (UserError when
  // tp does not split the model).
  const parallel::StrategyTraits tr = parallel::traits(s);
  const model::TpDims slice = model::tp_dims(in.dims, shape.tp, 0);
  const auto specs = model::build_param_specs(in.dims, shape.tp);
  const auto layouts = model::build_layouts(specs, model::num_units(in.dims), shape.tp, tr.shard_params ? shape.dp_shard : 1);
  const UnitTotals u = unit_totals(layouts, tr.shard_params);
  // 2. The batch split over this mesh's data-parallel ranks (BatchSpec::resolved).
  if (!in.batch.splits(shape.dp())) {
    p.valid = false;
    p.note = in.batch.split_error(shape.dp());
    return p;
  }
  p.batch = in.batch.resolved(shape.dp());
  // 3. Persistent state: fp32 master, gradients and two moments of the trainable elements;
  // no_shard keeps the frozen values inside its persistent compute copy (gathered).
  MemoryEstimate& m = p.memory;
  std::vector<FrozenBytes> frozen;
  for (const model::UnitLayout& L : layouts) frozen.push_back(frozen_bytes(in, specs, L, shape.tp, tr.shard_params));
  m.frozen = 0;
  for (const FrozenBytes& f : frozen) m.frozen += f.persistent;
  // A forward-only engine allocates the parameters and the frozen base, nothing else
  // persistent (parallel::FsdpOptions::forward_only): in fp32 the master; in bf16 no master
  // (FsdpEngine::compute_only) but the bf16 values alone -- sharded: this rank's shard;
  // no_shard: inside the persistent compute copy, counted in `gathered`.
  const bool compute_only = in.forward_only() && in.bf16;
  m.params = (compute_only ? (tr.shard_params ? 2.0 : 0.0) : 4.0) * u.state + m.frozen;
  m.grads = in.forward_only() ? 0.0 : 4.0 * u.state;
  m.optimizer = in.forward_only() ? 0.0 : 8.0 * u.state;
  // 4. Transient copies and buffers of a step, and the activations of a micro-step.
  transient_memory(in, s, layouts, frozen, u, p.batch.grad_accum, m);
  // A compute-only engine's load writes one unit's fp32 master at a time beside the bf16
  // values (no_shard: its compute copy exists from the start).
  if (compute_only) m.load = 4.0 * u.max_state + (tr.shard_params ? 0.0 : m.gathered);
  if (tr.shard_params && in.dims.base_quant != BaseQuant::None) {
    // The quantized frozen payload of a block's gather lives until the unit is waited for
    // and dequantized (FsdpEngine::wait_params): the prefetched blocks' payloads are in
    // flight beside the steady state. The step's start holds the outer unit gathered --
    // kept quantized: its payload alone, in `gathered` for the whole step; otherwise its T
    // copy and, until it is dequantized, its payload too -- with the first prefetched blocks
    // (micro_step.cpp: forward_keeping) before any activation exists. Adding the outer
    // payload to the steady state instead overstated the peak by the payload
    // (test_memory_accounting: QloraPlanPredictsThePeakAndTheFrozenGather).
    const double elem_bytes = in.bf16 ? 2.0 : 4.0;
    const int prefetched = std::min(in.prefetch, in.dims.n_layers);
    const double block_wire = layouts.size() > 1 ? frozen[1].wire : 0.0;
    // The outer unit kept quantized is its payload; in T (base_quant_embeddings=false) its
    // gather lands in place.
    const double outer_start = outer_kept_quantized(in) ? frozen[0].wire : elem_bytes * u.outer;
    m.comm_buffers += prefetched * block_wire;
    m.step_start = outer_start + prefetched * (elem_bytes * u.max_block + block_wire);
  }
  m.activations = activation_memory(in, slice, p.activation_traffic, p.attention_score_traffic);
  if (in.forward_only()) m.activations = forward_activation_memory(in, slice);
  if (outer_kept_quantized(in) && u.frozen > 0) {
    // The LM head of a kept-quantized outer unit dequantizes its weight a chunk at a time
    // into scratch (model::Transformer::head_weight_scratch: the whole head when it is at
    // most kHeadWeightChunkElements). Meanwhile a resharding strategy holds only the block
    // the backward starts with (prefetched during the head; none without prefetch), not the
    // 1 + prefetch blocks of the steady state. Measured on the test's 8192 x 384 head, whose
    // scratch outweighs a block, this moment is the step's peak.
    const double elem_bytes = in.bf16 ? 2.0 : 4.0;
    const double scratch = elem_bytes * static_cast<double>(model::head_weight_chunk_elements(slice.vocab, in.dims.d_model));
    double released = 0;
    if (tr.shard_params && tr.reshard_after_forward) {
      const int alive_blocks = std::min(in.dims.n_layers, 1 + in.prefetch);
      const int head_blocks = std::min(in.dims.n_layers, in.prefetch > 0 ? 1 : 0);
      released = elem_bytes * (alive_blocks - head_blocks) * u.max_block;
    }
    m.head = m.steady() - released + scratch;
  }
  // 5. Communication per optimizer step.
  p.comm = step_communication(in, s, shape, layouts, frozen, u, p.batch.grad_accum);
  // 6. Whether it fits the budget.
  const double budget = in.memory_budget * (1.0 - in.headroom);
  p.fits = in.memory_budget <= 0 || m.total() <= budget;
  if (!p.fits)
    p.note = strprintf("needs %s of the %s usable per rank", format_bytes(m.total()).c_str(),
                       format_bytes(budget).c_str());
  return p;
}

std::vector<StrategyPlan> plan_each_strategy(const PlanInput& in) {
  std::vector<StrategyPlan> out;
  for (parallel::Strategy s : {parallel::Strategy::NoShard, parallel::Strategy::ShardGradOp,
                               parallel::Strategy::HybridShard, parallel::Strategy::FullShard}) {
    StrategyPlan p;
    try {
      p = plan_strategy(in, s, mesh_shape_for_strategy(in, s));
    } catch (const UserError& e) {
      p.strategy = s;
      p.valid = false;
      p.note = e.what();
    }
    if (s == parallel::Strategy::HybridShard && p.valid && p.mesh_shape.dp_replicate == 1) {
      p.valid = false;
      p.note = "needs more than one replica (dp_replicate > 1); same as full_shard here";
    }
    out.push_back(p);
  }
  return out;
}

std::string fit_alternatives(const PlanInput& in, parallel::Strategy forced) {
  std::vector<std::string> out;
  for (const StrategyPlan& p : plan_each_strategy(in))
    if (p.valid && p.fits && p.strategy != forced)
      out.push_back(strprintf("parallel.strategy=%s on mesh %s (%s per rank)", parallel::strategy_name(p.strategy),
                              p.mesh_shape.str().c_str(), format_bytes(p.memory.total()).c_str()));
  // Checkpointing lowers what a backward keeps; eval and generate have none.
  if (!in.activation_checkpointing && !in.forward_only()) {
    PlanInput ac = in;
    ac.activation_checkpointing = true;
    try {
      const StrategyPlan p = plan_strategy(ac, forced, mesh_shape_for_strategy(ac, forced));
      if (p.valid && p.fits) {
        out.push_back(strprintf("train.activation_checkpointing=true with %s (%s per rank)", parallel::strategy_name(forced),
                                format_bytes(p.memory.total()).c_str()));
      } else {
        // The first strategy that fits with checkpointing, in the least-communication order.
        const std::vector<StrategyPlan> with_ac = plan_each_strategy(ac);
        const auto q_it = std::find_if(with_ac.begin(), with_ac.end(),
                                       [](const StrategyPlan& q) { return q.valid && q.fits; });
        if (q_it != with_ac.end()) {
          const StrategyPlan& q = *q_it;
          out.push_back(strprintf("train.activation_checkpointing=true with parallel.strategy=%s on mesh %s (%s per "
                                  "rank)",
                                  parallel::strategy_name(q.strategy), q.mesh_shape.str().c_str(),
                                  format_bytes(q.memory.total()).c_str()));
        }
      }
    } catch (const UserError&) {
      // The forced strategy's mesh is impossible with or without checkpointing: nothing to add.
    }
  }
  return join(out, ", or ");
}

std::string forward_memory_settings(const PlanInput& in) {
  std::vector<std::string> ways;
  ways.emplace_back("add ranks (parallel.strategy=full_shard or parallel.tp splits the parameters over them)");
  if (in.use == ModelUse::Generate) {
    // One sequence: what grows with the text is its forward and KV cache.
    ways.emplace_back("use fewer --tokens or a shorter prompt");
  } else {
    ways.emplace_back("use a smaller train.micro_batch or train.seq_len");
  }
  // A LoRA model's frozen base in the compute dtype: QLoRA holds it in 4 bits.
  if (in.dims.lora_rank > 0 && in.dims.base_quant == BaseQuant::None) ways.emplace_back("model.base_quant=nf4");
  // bf16 halves the activations, the gathered copies and -- the forward-only engine being
  // compute-only in bf16 (FsdpEngine::compute_only: no fp32 master) -- the parameters, but
  // its load holds one unit's fp32 master beside the bf16 values: where one unit outweighs
  // the rest of the model (a large vocabulary over few, narrow layers) bf16 needs more.
  // Named only where the least any strategy plans goes down with it.
  if (!in.bf16) {
    const auto least = [](const PlanInput& x) {
      double best = 0;
      for (const StrategyPlan& p : plan_each_strategy(x))
        if (p.valid && (best == 0 || p.memory.total() < best)) best = p.memory.total();
      return best;
    };
    PlanInput bf16 = in;
    bf16.bf16 = true;
    if (least(bf16) < least(in)) ways.emplace_back("train.precision=bf16");
  }
  std::string text;
  for (std::size_t i = 0; i < ways.size(); ++i) text += (i == 0 ? "" : i + 1 == ways.size() ? ", or " : ", ") + ways[i];
  return text;
}

}  // namespace meshtrain::plan
