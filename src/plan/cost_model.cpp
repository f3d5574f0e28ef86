// The cost model's pure predictor (plan/cost_model.hpp): arithmetic on the planner's
// memory and communication figures and the machine's measurements, nothing measured here.
#include "plan/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/step_flops.hpp"

namespace meshtrain::plan {

double recompute_flops_per_token(const model::ModelDims& d, int seq_len) {
  return 2.0 * d.n_layers * static_cast<double>(seq_len) * d.d_model;
}

GroupLink group_link(int n, int stride, int ranks_per_node, const CostModelInputs& c) {
  GroupLink g;
  g.ranks = n;
  const int rpn = std::max(1, ranks_per_node);
  const long span = static_cast<long>(n) * stride;  // consecutive ranks one group's members lie in
  // Groups are laid out at multiples of their span, so they stay inside nodes iff the span
  // divides the node.
  g.crosses_nodes = n > 1 && (span > rpn || rpn % span != 0);
  g.members_per_node = g.crosses_nodes ? std::max(1, std::min(n, rpn / std::max(1, stride))) : n;
  // Across nodes every member brings its own network link (inter_bus_bytes is one rank's
  // share of the network): a node's members import the group's data through members_per_node
  // links and spread it over the node's fabric (NCCL's rings over all of a node's NICs), so
  // the ring's bus bandwidth is members x network, capped by the node's own fabric.
  g.bus_bytes = g.crosses_nodes ? std::min(c.intra_bus_bytes, g.members_per_node * c.inter_bus_bytes) : c.intra_bus_bytes;
  return g;
}

double collective_seconds(const GroupLink& g, int collectives, double bus_volume, Collective kind,
                          const CostModelInputs& c) {
  if (g.ranks <= 1 || (collectives == 0 && bus_volume == 0)) return 0;
  const bool all_reduce = kind == Collective::AllReduce;
  const bool ring_all_reduce = c.mpi_all_reduce == MpiAllReduce::Ring;
  if (c.mpi_collectives && all_reduce && c.mpi_all_reduce == MpiAllReduce::HalvingDoubling) {
    // Rabenseifner (libnbc's redscat_allgather): the largest power of two p' <= n ranks
    // exchange 1/2, 1/4, ... of the buffer with partners 1, 2, 4, ... group ranks away (the
    // reduce-scatter), then the same exchanges in reverse (the all-gather), both directions
    // at once. Consecutive group ranks share a node first, so the exchanges with partners at
    // least members_per_node away cross nodes, where every member of the node exchanges at
    // once: each at one rank's network share. The n - p' extra ranks first fold into a
    // neighbour (half the buffer each way, then half back) and get the whole result back at
    // the end. The bus bandwidths are what `bench comm` reports for a 2-rank all-reduce,
    // itself one exchange of half the buffer each way: busbw is the exchange rate.
    const int n = g.ranks;
    const int members = g.crosses_nodes ? std::max(1, g.members_per_node) : n;
    const int steps = static_cast<int>(std::floor(std::log2(static_cast<double>(n))));
    const int extra = n - (1 << steps);
    const double buffer = bus_volume * n / (2.0 * (n - 1));
    double seconds = 0;
    for (int k = 0; k < steps; ++k) {
      const double rate = (1 << k) >= members ? c.inter_bus_bytes : c.intra_bus_bytes;
      seconds += 2.0 * buffer / static_cast<double>(2 << k) / rate;
    }
    if (extra > 0) seconds += 2.0 * buffer / (members >= 2 ? c.intra_bus_bytes : c.inter_bus_bytes);
    return collectives * (2 * steps + (extra > 0 ? 3 : 0)) * c.latency_s + seconds;
  }
  if (c.mpi_collectives && kind != Collective::AllGather && !(all_reduce && ring_all_reduce)) {
    // libnbc's binomial reduce to rank 0 over the group's members (consecutive group ranks
    // share a node first): the first log2(members per node) hops stay inside a node, the
    // rest cross nodes, and every hop carries the whole buffer. Then either the binomial
    // broadcast back (all-reduce: the same hops again) or rank 0 sends every other member
    // its block (reduce-scatter). A hop is one flow in one direction; a user-chosen binomial
    // all-reduce is timed the same way. Inside a node a hop moves at a multiple of the
    // measured all-gather bus bandwidth (CostConstants::mpi_tree_hop_intra_factor). Across
    // nodes the bus bandwidth is one rank's share of
    // its node's network (`bench comm`'s 2-rank all-reduces with every rank of a node in
    // one: each rank's flow at busbw). The node's groups of this kind hop at once (the other
    // mesh dimension inside the node keeps them in step), so a hop gets the node's network
    // split between them: members_per_node x busbw, the rings' rate (group_link).
    const int n = g.ranks;
    const int rounds = static_cast<int>(std::ceil(std::log2(static_cast<double>(n))));
    const int members = g.crosses_nodes ? std::max(1, g.members_per_node) : n;
    const int intra_rounds = g.crosses_nodes ? static_cast<int>(std::floor(std::log2(static_cast<double>(members)))) : rounds;
    const int inter_rounds = rounds - intra_rounds;
    const double hop_intra = c.constants.mpi_tree_hop_intra_factor * c.intra_bus_bytes, hop_inter = g.crosses_nodes ? g.bus_bytes : hop_intra;
    const double buffer = bus_volume * n / ((all_reduce ? 2.0 : 1.0) * (n - 1));  // all ranks' data
    const double tree = buffer * (intra_rounds / hop_intra + inter_rounds / hop_inter);
    if (all_reduce) return collectives * 2.0 * rounds * c.latency_s + 2.0 * tree;
    const double block = buffer / n;
    const double scatter = block * ((members - 1) / hop_intra + (n - members) / hop_inter);
    return collectives * (rounds + n - 1) * c.latency_s + tree + scatter;
  }
  // A ring collective over n ranks takes n-1 steps (all-gather, reduce-scatter) or 2(n-1)
  // (all-reduce), each paying the per-step latency; the bytes move at the bus bandwidth.
  const double steps = (all_reduce ? 2.0 : 1.0) * (g.ranks - 1);
  return collectives * steps * c.latency_s + bus_volume / g.bus_bytes;
}

std::string all_reduce_description(const CostModelInputs& c) {
  if (!c.mpi_collectives) return "a ring (NCCL)";
  return std::string(c.mpi_all_reduce == MpiAllReduce::HalvingDoubling ? "" : "a ") + describe(c.mpi_all_reduce) + " (MPI)";
}

double document_attention_fraction(int seq_len, double document_tokens, int rows) {
  const int n = static_cast<int>(std::lround(document_tokens));
  if (n <= 0 || n >= seq_len || rows >= seq_len || rows <= 0) return 1.0;
  double computed = 0, full = 0;
  for (int i0 = 0; i0 < seq_len; i0 += rows) {
    const int i1 = std::min(seq_len, i0 + rows);
    computed += static_cast<double>(i1 - i0) * (i1 - i0 / n * n);  // keys [doc_start(i0), i1)
    full += static_cast<double>(i1 - i0) * i1;
  }
  return computed / full;
}

void add_document_attention_work(const std::int32_t* doc_start, int B, int T, int rows, double& computed,
                                 double& full) {
  rows = std::max(1, std::min(rows, T));
  for (int b = 0; b < B; ++b) {
    const std::int32_t* row = doc_start + static_cast<std::size_t>(b) * T;
    for (int i0 = 0; i0 < T; i0 += rows) {
      const int i1 = std::min(T, i0 + rows);
      computed += static_cast<double>(i1 - i0) * (i1 - row[i0]);  // keys [doc_start(i0), i1)
      full += static_cast<double>(i1 - i0) * i1;
    }
  }
}

namespace {

/// eval and generate (in.forward_only()): one forward pass of PlanInput::forward_tokens per
/// rank -- its GEMMs, its share of the memory-bound kernels, the gathers of a sharded
/// strategy (they hide behind the forward's compute, all but the pipeline fill) and tensor
/// parallelism's forward all-reduces. No backward, reduction, replication or optimizer: so a
/// strategy that gathers for every forward (generate: for every token) ranks behind one
/// that holds the parameters when both fit.
StepPrediction predict_forward(const PlanInput& in, const StrategyPlan& p, const CostModelInputs& c) {
  StepPrediction r;
  const model::ModelDims& d = in.dims;
  const CostConstants& k = c.constants;
  const int tp = p.mesh_shape.tp;
  const double tokens_per_rank = in.forward_tokens();
  const double gemm_rate = c.model_gemm_flops > 0 ? c.model_gemm_flops : c.gemm_flops;
  // A token attends to up to seq_len positions (generate: the new token against the whole
  // KV cache, counted as the last token of a window of that length).
  const int seq_len = in.batch.seq_len;
  const double fa =
      document_attention_fraction(seq_len, in.document_tokens, in.attention_rows > 0 ? in.attention_rows : seq_len);
  const double forward = model::train_step_flops(d, seq_len, false, fa).forward;
  const double attention = fa * (d.flops_per_token_forward(seq_len) - d.flops_per_token_forward(0));
  if (c.attention_flops > 0) {
    r.attention_s = attention * tokens_per_rank / tp / c.attention_flops;
    r.gemm_s = (forward - attention) * tokens_per_rank / tp / gemm_rate + r.attention_s;
  } else {
    r.gemm_s = forward * tokens_per_rank / tp / gemm_rate;
  }
  // The memory-bound kernels' passes over the activations this forward writes (the plan's
  // traffic is the whole batch's: scaled to the tokens of this pass), and the MLP
  // activation's forward -- about half of its measured forward + backward, the share
  // checkpointing's recomputation is charged too.
  const double batch_tokens = static_cast<double>(in.batch.micro_batch) * seq_len;
  const double streamed = (p.activation_traffic - (c.attention_flops > 0 ? p.attention_score_traffic : 0.0)) *
                          (batch_tokens > 0 ? tokens_per_rank / batch_tokens : 0.0);
  const double hidden = tokens_per_rank * d.n_layers * (static_cast<double>(d.ffn_dim) / tp);
  r.activation_s = hidden * c.activation_s_per_elem * k.checkpoint_activation_rework;
  r.elementwise_s = r.activation_s + k.forward_elementwise_passes * streamed / 2.0 / c.copy_bytes;
  r.compute_s = r.gemm_s + r.elementwise_s;

  const int rpn = std::max(1, in.ranks_per_node);
  const GroupLink tp_link = group_link(tp, 1, rpn, c);
  const GroupLink shard_link = group_link(p.mesh_shape.dp_shard, tp, rpn, c);
  r.shard_crosses_nodes = shard_link.crosses_nodes;
  r.shard_bus_bytes = shard_link.bus_bytes;
  const CommVolume& v = p.comm;  // a forward pass's (planner: step_communication)
  r.fsdp_comm_s = collective_seconds(shard_link, v.gather_collectives, v.fsdp_gather, Collective::AllGather, c);
  r.tp_comm_s = collective_seconds(tp_link, v.tp_collectives, v.tp, Collective::AllReduce, c) +
                (tp > 1 ? v.tp_collectives * c.sync_seconds(tp) : 0.0);
  const double fill_g = v.fill_gather > 0 ? collective_seconds(shard_link, 2, v.fill_gather, Collective::AllGather, c) : 0.0;
  r.exposed_fsdp_s = in.prefetch > 0 ? std::min(r.fsdp_comm_s, fill_g + std::max(0.0, r.fsdp_comm_s - fill_g - r.compute_s))
                                     : r.fsdp_comm_s;
  r.exposed_fsdp_s += (1.0 - std::clamp(c.overlap, 0.0, 1.0)) * (r.fsdp_comm_s - r.exposed_fsdp_s);
  r.step_seconds_no_overlap = r.compute_s + r.fsdp_comm_s + r.tp_comm_s;
  r.step_seconds_overlap = r.compute_s + r.tp_comm_s + r.exposed_fsdp_s;
  // eval's data-parallel ranks read different windows; generate's all run the same sequence.
  const double ranks_reading = in.use == ModelUse::Generate ? 1.0 : static_cast<double>(p.mesh_shape.dp());
  r.tokens_per_s = r.step_seconds_overlap > 0 ? tokens_per_rank * ranks_reading / r.step_seconds_overlap : 0;
  return r;
}

}  // namespace

StepPrediction predict_step(const PlanInput& in, const StrategyPlan& p, const CostModelInputs& c) {
  StepPrediction r;
  const model::ModelDims& d = in.dims;
  const CostConstants& k = c.constants;
  if (!p.valid) return r;
  if (in.forward_only()) return predict_forward(in, p, c);
  const int dp = p.mesh_shape.dp(), tp = p.mesh_shape.tp;
  const double global = p.batch.global_batch;  // windows per step: BatchSpec::resolved for this dp
  const double tokens = global * in.batch.seq_len;
  const double tokens_per_rank = tokens / dp;
  const double gemm_rate = c.model_gemm_flops > 0 ? c.model_gemm_flops : c.gemm_flops;
  // The GEMM FLOPs the step performs (model/step_flops.hpp): forward, input gradients,
  // weight gradients of the trainable matrices only (a frozen LoRA base has none), the
  // scores backward recomputes, and with activation checkpointing every block's forward
  // again.
  const double ac = p.activation_checkpointing ? 1.0 : 0.0;
  // Packed rows: only the fraction `fa` of the attention is computed.
  const int seq_len = in.batch.seq_len;
  const double fa =
      document_attention_fraction(seq_len, in.document_tokens, in.attention_rows > 0 ? in.attention_rows : seq_len);
  const model::StepFlops flops = model::train_step_flops(d, seq_len, p.activation_checkpointing, fa, in.dpo, !in.simpo);
  if (c.attention_flops > 0) {  // attention is a fused kernel timed on its own (cuDNN)
    r.attention_s = flops.attention * tokens_per_rank / tp / c.attention_flops;
    r.gemm_s = (flops.total() - flops.attention) * tokens_per_rank / tp / gemm_rate + r.attention_s;
  } else {
    r.gemm_s = flops.total() * tokens_per_rank / tp / gemm_rate;
  }
  // Memory-bound kernels: the activations every micro-step's forward writes (stored or
  // recomputed) streamed by the kernels' passes over forward and backward (more with
  // checkpointing: its forward again), plus the optimizer's pass over the state. A fused
  // attention kernel (timed above) never writes its scores: they are not streamed then.
  const double streamed = p.activation_traffic - (c.attention_flops > 0 ? p.attention_score_traffic : 0.0);
  const double act_bytes = streamed * p.batch.grad_accum;
  // fp32 master elements this rank updates (a frozen LoRA base has none)
  const double state_elems = (p.memory.params - p.memory.frozen) / 4.0;
  r.optimizer_s = c.adamw_s_per_elem > 0 ? state_elems * c.adamw_s_per_elem : k.adamw_bytes_per_element * state_elems / c.copy_bytes;
  // MLP hidden elements per step (tokens x ffn_dim / tp per block), forward + backward (the
  // measured rate), plus the recomputed forward with checkpointing.
  const double hidden = tokens_per_rank * d.n_layers * (static_cast<double>(d.ffn_dim) / tp);
  r.activation_s = hidden * c.activation_s_per_elem * (1.0 + k.checkpoint_activation_rework * ac);  // 0 unmeasured: in the bytes term
  r.elementwise_s = r.optimizer_s + r.activation_s + (k.elementwise_passes + k.checkpoint_elementwise_passes * ac) * act_bytes / 2.0 / c.copy_bytes;
  r.compute_s = r.gemm_s + r.elementwise_s;

  // Each mesh group's ring, on the links it crosses (tp fastest-varying: tp groups are
  // consecutive ranks, shard groups stride tp, replicate groups stride dp_shard x tp).
  const int rpn = std::max(1, in.ranks_per_node);
  const GroupLink tp_link = group_link(tp, 1, rpn, c);
  const GroupLink shard_link = p.comm.reduce_is_all_reduce ? group_link(dp, tp, rpn, c)
                                                           : group_link(p.mesh_shape.dp_shard, tp, rpn, c);
  const GroupLink rep_link = group_link(p.mesh_shape.dp_replicate, p.mesh_shape.dp_shard * tp, rpn, c);
  r.shard_crosses_nodes = shard_link.crosses_nodes;
  r.shard_bus_bytes = shard_link.bus_bytes;
  r.replicate_bus_bytes = rep_link.bus_bytes;

  const auto& v = p.comm;
  const Collective reduce_kind = v.reduce_is_all_reduce ? Collective::AllReduce : Collective::ReduceScatter;
  const int n_gather_bwd = v.fsdp_gather > 0 ? static_cast<int>(std::lround(v.gather_collectives * v.fsdp_gather_backward / v.fsdp_gather)) : 0;
  const double gather_fwd_s = collective_seconds(shard_link, v.gather_collectives - n_gather_bwd,
                                                 v.fsdp_gather - v.fsdp_gather_backward, Collective::AllGather, c);
  const double gather_bwd_s = collective_seconds(shard_link, n_gather_bwd, v.fsdp_gather_backward, Collective::AllGather, c);
  const double reduce_s = collective_seconds(shard_link, v.reduce_collectives, v.fsdp_reduce, reduce_kind, c);
  r.replicate_comm_s = collective_seconds(rep_link, v.replicate_collectives, v.replicate, Collective::AllReduce, c);
  r.fsdp_comm_s = gather_fwd_s + gather_bwd_s + reduce_s;
  // Tensor-parallel all-reduces are blocking and sit between kernels: each also pays the
  // measured synchronisation cost of its group (ranks that share cores wait for a parked peer).
  r.tp_comm_s = collective_seconds(tp_link, v.tp_collectives, v.tp, Collective::AllReduce, c) +
                (tp > 1 ? v.tp_collectives * c.sync_seconds(tp) : 0.0);

  // Overlap: the gathers of forward hide behind forward compute, the re-gathers and
  // reductions of backward behind backward compute (the optimizer runs after both). What
  // cannot hide is the pipeline fill - the first gathers of each micro-step (the outer unit
  // and the first block) and the outer unit's reduction, which the embedding's backward
  // produces last - and whatever exceeds the compute. The replicate all-reduce runs after
  // backward (FsdpEngine::finish_step), so it is exposed entirely.
  const double fill_g = v.fill_gather > 0 ? collective_seconds(shard_link, p.batch.grad_accum * 2, v.fill_gather, Collective::AllGather, c) : 0.0;
  const double fill_r = v.fill_reduce > 0 ? collective_seconds(shard_link, 1, v.fill_reduce, reduce_kind, c) : 0.0;
  const double overlappable = r.compute_s - r.optimizer_s;
  // Forward's share of the GEMM passes: 1 / (3 + ac) when every matmul trains (written so,
  // not as the quotient of the counts, so the prediction stays bit for bit what it was);
  // more with a frozen base, whose backward has no weight gradients.
  const double passes =
      d.lora_rank > 0 || in.dpo ? (flops.total() - flops.scores_again) / flops.forward : 3.0 + ac;
  const double fwd_c = overlappable / passes, bwd_c = overlappable - fwd_c;
  if (in.prefetch > 0) {
    r.exposed_fsdp_s = std::min(r.fsdp_comm_s, fill_g + fill_r + std::max(0.0, gather_fwd_s - fill_g - fwd_c) +
                                                    std::max(0.0, gather_bwd_s + reduce_s - fill_r - bwd_c));
  } else {
    r.exposed_fsdp_s = r.fsdp_comm_s;
  }
  // Of what the schedule could hide, only the measured overlap fraction does hide.
  r.exposed_fsdp_s += (1.0 - std::clamp(c.overlap, 0.0, 1.0)) * (r.fsdp_comm_s - r.exposed_fsdp_s);
  r.step_seconds_no_overlap = r.compute_s + r.fsdp_comm_s + r.replicate_comm_s + r.tp_comm_s;
  r.step_seconds_overlap = r.compute_s + r.tp_comm_s + r.exposed_fsdp_s + r.replicate_comm_s;
  r.tokens_per_s = r.step_seconds_overlap > 0 ? tokens / r.step_seconds_overlap : 0;
  return r;
}

}  // namespace meshtrain::plan
