#include "meshtrain/parallel/planner.hpp"

#include <algorithm>

#include "meshtrain/core/error.hpp"
#include "meshtrain/core/format.hpp"
#include "meshtrain/kernels/attention.hpp"
#include "meshtrain/model/layout.hpp"
#include "meshtrain/model/transformer.hpp"
#include "meshtrain/parallel/reduction_plan.hpp"

namespace meshtrain::parallel {
namespace {

/// Saved activations of one block for one micro-batch (elements of `sT` bytes), mirroring
/// BlockCache. The attention keeps per query row its softmax statistics (two fp32 values),
/// not the (T, T) probabilities.
double block_activation_elems(const model::ModelDims& d, const model::TpDims& t, int B, int T, double sT) {
  const double N = static_cast<double>(B) * T, C = d.d_model, hd = d.head_dim;
  const double W = d.family == model::Family::Gpt2 ? 3.0 * t.heads * hd : (t.heads + 2.0 * t.kv_heads) * hd;
  const double mlp_in = d.family == model::Family::Gpt2 ? t.ffn : 2.0 * t.ffn;
  return N * C * 3 /*norm1, x_mid, norm2*/ + N * W + N * t.heads * 2.0 * 4.0 / sT /*attn_stats*/ +
         N * t.heads * hd /*attn_out*/ + N * mlp_in + N * t.ffn /*act*/;
}

/// Elements the attention's score strips pass through in one block's forward: the (T, T)
/// scores and probabilities of every head, written and read one strip at a time.
double block_attention_score_elems(const model::TpDims& t, int B, int T) {
  return static_cast<double>(B) * t.heads * T * T;
}

/// Largest backward scratch of a block (elements): dqkv + the attention's two score strips
/// + dy, or the MLP's; + dnorm.
double block_backward_scratch_elems(const model::ModelDims& d, const model::TpDims& t, int B, int T, int rows) {
  const double N = static_cast<double>(B) * T, C = d.d_model, hd = d.head_dim;
  const double W = d.family == model::Family::Gpt2 ? 3.0 * t.heads * hd : (t.heads + 2.0 * t.kv_heads) * hd;
  const double mlp = d.family == model::Family::Gpt2 ? t.ffn : 2.0 * t.ffn;
  const double strips = 2.0 * B * (rows > 0 ? rows : kernels::attention_block_rows(T)) * static_cast<double>(T);
  return std::max(N * W + strips + N * t.heads * hd, N * mlp + N * t.ffn) + N * C;
}

}  // namespace

MeshShape mesh_for_strategy(const PlanInput& in, Strategy s) {
  MeshRequest req = in.mesh;
  if (s == Strategy::HybridShard && req.dp_replicate == 1 && req.dp_shard == -1) {
    // Shard within a node, replicate across nodes.
    const int nodes = std::max(1, in.world / std::max(1, in.ranks_per_node));
    req.dp_replicate = nodes;
  }
  return resolve_mesh(req, in.world, in.ranks_per_node > 0 ? std::optional<int>(in.ranks_per_node) : std::nullopt);
}

std::vector<MeshShape> candidate_meshes(const PlanInput& in, Strategy s) {
  std::vector<MeshShape> out;
  const int world = in.world, rpn = in.ranks_per_node > 0 ? in.ranks_per_node : world;
  const auto fixed_ok = [](int want, int v) { return want == -1 || want == v; };
  for (int tp = 1; tp <= std::min(world, rpn); ++tp) {
    if (world % tp != 0 || rpn % tp != 0 || !fixed_ok(in.mesh.tp, tp)) continue;
    try {
      model::tp_dims(in.dims, tp, 0);  // heads, kv heads, ffn and vocabulary split evenly
    } catch (const UserError&) {
      continue;
    }
    const int dp = world / tp;
    for (int r = 1; r <= dp; ++r) {
      if (dp % r != 0) continue;
      const MeshShape m{r, dp / r, tp};
      if (!fixed_ok(in.mesh.dp_replicate, m.dp_replicate) || !fixed_ok(in.mesh.dp_shard, m.dp_shard)) continue;
      const bool all_in_shard = m.dp_replicate == 1;
      if ((s == Strategy::NoShard || s == Strategy::FullShard) && !all_in_shard) {
        // Only when the user fixed dp_replicate > 1 (then these run as configured).
        if (in.mesh.dp_replicate == -1) continue;
      }
      if (s == Strategy::HybridShard && (m.dp_replicate == 1 || m.dp_shard == 1)) continue;
      out.push_back(m);
    }
  }
  return out;
}

StrategyPlan plan_strategy(const PlanInput& in, Strategy s, const MeshShape& mesh) {
  StrategyPlan p;
  p.strategy = s;
  p.mesh = mesh;
  const StrategyTraits tr = traits(s);
  const model::TpDims t = model::tp_dims(in.dims, mesh.tp, 0);
  const auto specs = model::build_param_specs(in.dims, mesh.tp);
  const int units = model::num_units(in.dims);
  const int shards = tr.shard_params ? mesh.dp_shard : 1;
  const auto layouts = model::build_layouts(specs, units, mesh.tp, shards);

  const int dp = mesh.dp();
  if (in.global_batch > 0) {
    if (in.global_batch % (in.micro_batch * dp) != 0) {
      p.valid = false;
      p.note = strprintf("train.global_batch=%d is not a multiple of micro_batch x dp = %d x %d", in.global_batch,
                         in.micro_batch, dp);
      return p;
    }
    p.grad_accum = in.global_batch / (in.micro_batch * dp);
  } else {
    p.grad_accum = in.grad_accum;
  }

  const double sT = in.bf16 ? 2.0 : 4.0;
  const double sR = in.reduce_dtype == DType::BF16 ? 2.0 : 4.0;
  // Whole units (what is gathered) and their trainable segments (what has fp32 master,
  // gradients and moments, and is reduced); they differ under LoRA only, where the frozen
  // base is held in the compute dtype (model::UnitLayout).
  double state_elems = 0, frozen_elems = 0, max_block = 0, outer = 0, all_padded = 0;
  double max_block_t = 0, outer_t = 0, all_trainable = 0;
  int reduced_units = 0;
  for (const auto& L : layouts) {
    state_elems += tr.shard_params ? L.shard_numel : L.trainable_padded();
    frozen_elems += tr.shard_params ? L.frozen_shard_numel : L.frozen_padded();
    all_padded += L.padded();
    all_trainable += L.trainable_padded();
    reduced_units += L.trainable_padded() > 0 ? 1 : 0;
    if (L.unit == 0) {
      outer = static_cast<double>(L.padded());
      outer_t = static_cast<double>(L.trainable_padded());
    } else {
      max_block = std::max(max_block, static_cast<double>(L.padded()));
      max_block_t = std::max(max_block_t, static_cast<double>(L.trainable_padded()));
    }
  }
  const bool frozen = frozen_elems > 0;
  MemoryEstimate& m = p.memory;
  // no_shard keeps the frozen values inside its persistent compute copy (gathered).
  m.frozen = tr.shard_params ? sT * frozen_elems : 0.0;
  m.params = 4.0 * state_elems + m.frozen;
  m.grads = 4.0 * state_elems;
  m.optimizer = 8.0 * state_elems;

  // Transient parameter copies in the compute dtype.
  const int alive_blocks = std::min(in.dims.n_layers, 1 + in.prefetch);
  if (s == Strategy::NoShard) m.gathered = (in.bf16 || frozen) ? sT * all_padded : 0.0;
  else if (s == Strategy::ShardGradOp) m.gathered = sT * all_padded;  // kept from forward to backward
  else m.gathered = sT * (outer + alive_blocks * max_block);
  // Gradient and communication buffers: which exist, in which dtype, and how long they
  // live is the engine's reduction recipe (parallel/reduction_plan.hpp), the same one
  // FsdpEngine interprets. All of them cover trainable segments only.
  const ReductionPlan rp = reduction_plan(tr, in.bf16 ? DType::BF16 : DType::F32, in.reduce_dtype);
  const ReductionRecipe& rc = rp.first;  // the backward's buffers are the same every micro-step
  // Units whose buffers live together while reductions are in flight: the outer unit's
  // (its gradients grow through the whole backward, reduced last), the block whose
  // reduction is in flight and the block computing.
  const double in_flight = outer_t + 2 * max_block_t;
  const double micro_b = static_cast<double>(rc.micro_grads_elem_bytes());
  const double accum_b = static_cast<double>(rc.local_accum_elem_bytes());
  // The fp32 local accumulation of every unit lives across micro-steps (no communication
  // until the last); with one micro-step each unit's is reduced right after its backward.
  m.grad_buffers = accum_b * (p.grad_accum > 1 ? all_trainable : in_flight);
  if (!rc.widen_after_backward) m.grad_buffers += micro_b * in_flight;  // sent (or cast) per micro-step
  else if (rc.local_accum_buffer) m.grad_buffers += micro_b * max_block_t;  // widened after each backward
  else m.grad_buffers += micro_b * std::max(outer_t, max_block_t);
  // Communication buffers: the staging copies of the recipes (ReductionRecipe::
  // comm_buffer_bytes) of the reductions the engine holds at once - the one just started
  // and the one before it (FsdpEngine::launch_reduction completes older ones) - over the
  // backward's unit order, for micro-step 0's recipe and the later ones. The same walk as
  // the engine's, so the figure is its allocation exactly (test_memory_accounting).
  // Strategies that accumulate locally reduce on the last micro-step only; the others on
  // every one, where the third and later repeat the second (same recipe, same predecessor).
  {
    double peak = 0, previous = 0;
    const auto walk = [&](const ReductionRecipe& r) {
      for (int u = static_cast<int>(layouts.size()) - 1; u >= 0; --u) {
        const model::UnitLayout& Lu = layouts[u];
        if (Lu.trainable_padded() == 0) continue;
        const double b = static_cast<double>(r.comm_buffer_bytes(Lu.trainable_padded(), Lu.shard_numel));
        peak = std::max(peak, previous + b);
        previous = b;
      }
    };
    if (tr.reduce_every_micro) {
      for (int micro = 0; micro < std::min(p.grad_accum, 3); ++micro) walk(rp.at(micro == 0));
    } else {
      walk(rp.at(p.grad_accum == 1));
    }
    m.comm_buffers = peak;
  }

  const int B = in.micro_batch, T = in.seq_len;
  const double N = static_cast<double>(B) * T, C = in.dims.d_model;
  const double per_block = block_activation_elems(in.dims, t, B, T, sT);
  const double L = in.dims.n_layers;
  double act = (L + 2) * N * C;  // residual stream at every block boundary + dx
  act += in.activation_checkpointing ? per_block : L * per_block;
  act += block_backward_scratch_elems(in.dims, t, B, T, in.attention_rows);
  const double chunk = std::min(N, std::max(1.0, static_cast<double>(model::kHeadChunkElements) / t.vocab));
  act += chunk * t.vocab + 2 * N * C;  // head: logits chunk, normed, dnormed
  m.activations = sT * act;

  // Activations one micro-step's forward writes, stored or not (the checkpointed blocks
  // write theirs again in the recomputation; the cost model adds that pass).
  p.micro_batch = in.micro_batch;
  p.activation_checkpointing = in.activation_checkpointing;
  p.activation_traffic = sT * ((L + 2) * N * C + L * (per_block + block_attention_score_elems(t, B, T)) +
                               N * t.vocab + 2 * N * C);  // head: every logit once

  // Communication per optimizer step.
  CommVolume& c = p.comm;
  const int A = p.grad_accum;
  const double S = mesh.dp_shard;
  double unit_bytes_T = 0, unit_bytes_R = 0;
  for (const auto& Lu : layouts) {
    unit_bytes_T += sT * Lu.padded();            // gathered: frozen and trainable
    unit_bytes_R += sR * Lu.trainable_padded();  // reduced: trainable only
  }
  const double outer_T = sT * layouts[0].padded();
  const double blocks_T = unit_bytes_T - outer_T;
  if (tr.shard_params && S > 1) {
    // Per micro-step the outer unit is gathered once and every block once (forward), or
    // twice when it is resharded after forward (forward and backward).
    c.fsdp_gather = A * (S - 1) / S * (outer_T + (tr.reshard_after_forward ? 2.0 : 1.0) * blocks_T);
    c.fsdp_gather_backward = tr.reshard_after_forward ? A * (S - 1) / S * blocks_T : 0.0;
    c.fsdp_reduce = (tr.reduce_every_micro ? A : 1) * (S - 1) / S * unit_bytes_R;
    // One all-gather per non-empty segment (frozen, trainable) of a unit.
    const auto segments = [](const model::UnitLayout& Lu) {
      return (Lu.frozen_shard_numel > 0 ? 1 : 0) + (Lu.shard_numel > 0 ? 1 : 0);
    };
    const int block_segments = in.dims.n_layers > 0 ? segments(layouts[1]) : 0;
    c.gather_collectives = A * (segments(layouts[0]) + (tr.reshard_after_forward ? 2 : 1) * in.dims.n_layers * block_segments);
    c.reduce_collectives = (tr.reduce_every_micro ? A : 1) * reduced_units;
    c.fill_gather = A * (S - 1) / S * (outer_T + sT * max_block);
    c.fill_reduce = (S - 1) / S * sR * outer_t;
  } else if (!tr.shard_params && dp > 1) {
    c.fsdp_reduce = 2.0 * (dp - 1) / dp * unit_bytes_R;
    c.reduce_collectives = reduced_units;
    c.reduce_is_all_reduce = true;
    c.fill_reduce = 2.0 * (dp - 1) / dp * sR * outer_t;
  }
  c.fsdp_collectives = c.gather_collectives + c.reduce_collectives;
  if (tr.shard_params && mesh.dp_replicate > 1) {
    const double Rr = mesh.dp_replicate;
    c.replicate = 2.0 * (Rr - 1) / Rr * 4.0 * state_elems;
    c.replicate_collectives = reduced_units;
  }
  if (mesh.tp > 1) {
    // Per block: forward 2 (attention out, MLP out), backward 2 (norm input grads), plus the
    // recomputation's 2 with activation checkpointing; embedding 1 and head 1.
    const double per = 2.0 * (mesh.tp - 1) / mesh.tp * N * C * sT;
    const double per_block_ars = in.activation_checkpointing ? 6 : 4;
    c.tp = A * per * (per_block_ars * L + 2);
    c.tp_collectives = static_cast<int>(A * (per_block_ars * L + 2));
  }

  const double budget = in.memory_budget * (1.0 - in.headroom);
  p.fits = in.memory_budget <= 0 || m.total() <= budget;
  if (!p.fits)
    p.note = strprintf("needs %s of the %s usable per rank", format_bytes(m.total()).c_str(),
                       format_bytes(budget).c_str());
  return p;
}

Plan make_plan(const PlanInput& in) {
  Plan plan;
  const Strategy order[] = {Strategy::NoShard, Strategy::ShardGradOp, Strategy::HybridShard, Strategy::FullShard};
  const int nodes = std::max(1, in.world / std::max(1, in.ranks_per_node));
  for (Strategy s : order) {
    StrategyPlan p;
    try {
      p = plan_strategy(in, s, mesh_for_strategy(in, s));
    } catch (const UserError& e) {
      p.strategy = s;
      p.valid = false;
      p.note = e.what();
    }
    if (s == Strategy::HybridShard && p.valid && p.mesh.dp_replicate == 1) {
      p.valid = false;
      p.note = "needs more than one replica (dp_replicate > 1); same as full_shard here";
    }
    plan.options.push_back(p);
  }
  // Least communication first: no_shard < shard_grad_op < hybrid_shard < full_shard.
  for (int i = 0; i < static_cast<int>(plan.options.size()); ++i) {
    const StrategyPlan& p = plan.options[i];
    if (p.valid && p.fits) {
      plan.chosen = i;
      break;
    }
  }
  bool any_valid = false;
  for (const auto& p : plan.options) any_valid = any_valid || p.valid;
  if (!any_valid) {
    plan.reason = "no strategy can run this configuration: " + plan.options.back().note;
  } else if (plan.chosen < 0) {
    const StrategyPlan* least = nullptr;
    for (const auto& p : plan.options)
      if (p.valid && (!least || p.memory.total() < least->memory.total())) least = &p;
    plan.reason = strprintf("no strategy fits the memory budget (the smallest, %s, needs %s per rank of %s usable): "
                            "add ranks, use train.activation_checkpointing=true, a smaller train.micro_batch, or bf16",
                            strategy_name(least->strategy), format_bytes(least->memory.total()).c_str(),
                            format_bytes(in.memory_budget * (1 - in.headroom)).c_str());
  } else {
    const StrategyPlan& p = plan.options[plan.chosen];
    plan.reason = strprintf("%s is the least-communication strategy that fits: %s per rank of %s usable",
                            strategy_name(p.strategy), format_bytes(p.memory.total()).c_str(),
                            format_bytes(in.memory_budget * (1 - in.headroom)).c_str());
    for (int i = 0; i < plan.chosen; ++i)
      if (plan.options[i].valid)
        plan.reason += strprintf("; %s does not fit (%s)", strategy_name(plan.options[i].strategy),
                                 plan.options[i].note.c_str());
    (void)nodes;
  }
  return plan;
}

std::string fit_alternatives(const PlanInput& in, Strategy forced) {
  std::vector<std::string> out;
  const Plan plan = make_plan(in);
  for (const StrategyPlan& p : plan.options)
    if (p.valid && p.fits && p.strategy != forced)
      out.push_back(strprintf("parallel.strategy=%s on mesh %s (%s per rank)", strategy_name(p.strategy),
                              p.mesh.str().c_str(), format_bytes(p.memory.total()).c_str()));
  if (!in.activation_checkpointing) {
    PlanInput ac = in;
    ac.activation_checkpointing = true;
    try {
      const StrategyPlan p = plan_strategy(ac, forced, mesh_for_strategy(ac, forced));
      if (p.valid && p.fits) {
        out.push_back(strprintf("train.activation_checkpointing=true with %s (%s per rank)", strategy_name(forced),
                                format_bytes(p.memory.total()).c_str()));
      } else {
        const Plan with_ac = make_plan(ac);
        if (with_ac.chosen >= 0) {
          const StrategyPlan& q = with_ac.options[with_ac.chosen];
          out.push_back(strprintf("train.activation_checkpointing=true with parallel.strategy=%s on mesh %s (%s per "
                                  "rank)",
                                  strategy_name(q.strategy), q.mesh.str().c_str(),
                                  format_bytes(q.memory.total()).c_str()));
        }
      }
    } catch (const UserError&) {
      // The forced strategy's mesh is impossible with or without checkpointing: nothing to add.
    }
  }
  return join(out, ", or ");
}

}  // namespace meshtrain::parallel
