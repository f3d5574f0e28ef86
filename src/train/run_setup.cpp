#include "meshtrain/train/run_setup.hpp"

#include "meshtrain/core/error.hpp"
#include "meshtrain/core/format.hpp"
#include "meshtrain/core/log.hpp"
#include "meshtrain/core/memory.hpp"
#include "meshtrain/kernels/attention.hpp"
#include "meshtrain/train/mesh_search.hpp"

namespace meshtrain::train {

BatchSpec BatchSpec::resolved(int dp) const {
  BatchSpec b = *this;
  if (global_batch > 0) {
    const int per = micro_batch * dp;
    MESHTRAIN_REQUIRE(global_batch % per == 0,
                      "train.global_batch=%d is not a multiple of train.micro_batch x data-parallel ranks = %d x %d "
                      "= %d; choose a global batch that is a multiple of %d, or change train.micro_batch",
                      global_batch, micro_batch, dp, per, per);
    b.grad_accum = global_batch / per;
  } else {
    b.global_batch = micro_batch * dp * grad_accum;
  }
  return b;
}

double memory_budget_per_rank(const RunSpec& spec, const Topology& topo, bool other) {
  if (spec.plan.device_memory) return static_cast<double>(spec.plan.device_memory->bytes);
  if (spec.parallel.memory_limit) return static_cast<double>(spec.parallel.memory_limit->bytes);
  const double device = static_cast<double>(device_memory_bytes());
  if (device > 0) return device;
  const int per_node = other && spec.plan.gpus_per_node > 0 ? spec.plan.gpus_per_node : topo.local_size;
  return static_cast<double>(host_total_memory_bytes()) / std::max(1, per_node);
}

namespace {

/// Where memory_budget_per_rank's number comes from, in words for messages.
std::string budget_source(const RunSpec& spec) {
  if (spec.plan.device_memory) return "plan.device_memory=" + spec.plan.device_memory->text;
  if (spec.parallel.memory_limit) return "parallel.memory_limit=" + spec.parallel.memory_limit->text;
  if (device_memory_bytes() > 0) return "the device's memory";
  return "node memory / ranks per node; parallel.memory_limit sets it";
}

}  // namespace

parallel::PlanInput plan_input(const RunSpec& spec, int world, int ranks_per_node, double budget) {
  parallel::PlanInput in;
  in.dims = spec.dims;
  in.world = world;
  in.ranks_per_node = ranks_per_node;
  in.mesh = spec.parallel.mesh;
  in.micro_batch = spec.batch.micro_batch;
  in.seq_len = spec.batch.seq_len;
  in.global_batch = spec.batch.global_batch;
  in.grad_accum = spec.batch.grad_accum;
  in.bf16 = spec.train.bf16();
  in.activation_checkpointing = spec.train.activation_checkpointing;
  in.reduce_dtype = spec.parallel.reduce_dtype;
  in.prefetch = spec.parallel.prefetch;
  in.memory_budget = budget;
  in.headroom = spec.parallel.memory_headroom;
  // The attention's scratch strips are as tall as the kernels' row blocks where the run
  // goes: this build's, unless `plan` is given a GPU target (plan.gemm_tflops), whose
  // kernels take the whole sequence at once.
  in.attention_rows = spec.plan.gemm_tflops > 0 ? spec.batch.seq_len : kernels::attention_block_rows(spec.batch.seq_len);
  return in;
}

RunSetup resolve_run(const RunSpec& spec, const Runtime& rt) {
  if (!searches_mesh(spec)) return resolve_run(spec, rt.topology());
  const CostModelInputs costs = cost_model_inputs(spec.plan, spec.batch, spec.parallel.backend, rt, spec.train.bf16(),
                                                  true, &spec.dims, 1);
  return resolve_run(spec, rt.topology(), &costs);
}

RunSetup resolve_run(const RunSpec& spec_in, const Topology& topo, const CostModelInputs* costs) {
  RunSetup r;
  r.spec = spec_in;
  const RunSpec& spec = r.spec;  // the planner's choices (mesh, micro-batch, checkpointing) land here
  r.dims = spec.dims;
  MESHTRAIN_REQUIRE(spec.batch.seq_len <= r.dims.max_seq_len, "train.seq_len=%d is longer than model.max_seq_len=%d",
                    spec.batch.seq_len, r.dims.max_seq_len);
  r.bf16 = spec.train.bf16();
  const int rpn = topo.uniform() ? topo.local_size : 0;
  r.memory_budget = memory_budget_per_rank(spec, topo, false);
  const parallel::PlanInput in = plan_input(spec, topo.world_size, rpn, r.memory_budget);

  parallel::StrategyPlan chosen;
  if (searches_mesh(spec)) {
    MESHTRAIN_REQUIRE(costs != nullptr, "internal: the mesh search needs the cost model's inputs");
    const MeshSearch ms = search_meshes(r.dims, in, search_space(spec), *costs);
    MESHTRAIN_REQUIRE(ms.chosen >= 0, "the planner found no mesh for this job: %s", ms.reason.c_str());
    chosen = ms.candidates[ms.chosen].plan;
    r.strategy_reason = "planner: " + ms.reason;
    r.spec.parallel.mesh = {chosen.mesh.dp_replicate, chosen.mesh.dp_shard, chosen.mesh.tp};
    r.spec.batch.micro_batch = chosen.micro_batch;
    r.spec.train.activation_checkpointing = chosen.activation_checkpointing;
    r.plan = parallel::make_plan(plan_input(spec, topo.world_size, rpn, r.memory_budget));
  } else if (spec.parallel.strategy == StrategyChoice::Auto) {
    r.plan = parallel::make_plan(in);
    MESHTRAIN_REQUIRE(r.plan.chosen >= 0, "parallel.strategy=auto: %s", r.plan.reason.c_str());
    chosen = r.plan.options[r.plan.chosen];
    r.strategy_reason = r.plan.reason;
  } else {
    r.plan = parallel::make_plan(in);
    const parallel::Strategy s = parallel::forced_strategy(spec.parallel.strategy);
    chosen = parallel::plan_strategy(in, s, parallel::mesh_for_strategy(in, s));
    MESHTRAIN_REQUIRE(chosen.valid, "parallel.strategy=%s: %s", choice_name(spec.parallel.strategy), chosen.note.c_str());
    r.strategy_reason = "set by parallel.strategy";
    const double need = chosen.memory.total();
    if (r.memory_budget > 0 && need > r.memory_budget) {
      // Allocating it would end in std::bad_alloc (or an out-of-memory kill) on some rank
      // part-way through start-up; say so now, with the numbers and what would fit.
      const std::string alternatives = parallel::fit_alternatives(in, chosen.strategy);
      throw UserError(strprintf(
          "parallel.strategy=%s on mesh %s needs %s per rank (parameters %s, gradients %s, optimizer %s, "
          "activations %s, gathered/communication buffers %s), more than the %s available per rank (%s); %s%s",
          choice_name(spec.parallel.strategy), chosen.mesh.str().c_str(), format_bytes(need).c_str(),
          format_bytes(chosen.memory.params).c_str(), format_bytes(chosen.memory.grads).c_str(),
          format_bytes(chosen.memory.optimizer).c_str(), format_bytes(chosen.memory.activations).c_str(),
          format_bytes(chosen.memory.gathered + chosen.memory.grad_buffers + chosen.memory.comm_buffers).c_str(),
          format_bytes(r.memory_budget).c_str(), budget_source(spec).c_str(),
          alternatives.empty() ? "nothing fits this job: use more ranks, bf16, a smaller train.micro_batch or "
                                 "train.seq_len, or a smaller model"
                               : "what would fit: ",
          alternatives.c_str()));
    }
    if (!chosen.fits)
      log::warn("parallel.strategy=%s may not fit in memory: %s (parallel.memory_limit or the device size sets the budget)",
                choice_name(spec.parallel.strategy), chosen.note.c_str());
  }
  r.strategy = chosen.strategy;
  r.mesh = chosen.mesh;
  // Validate the TP slice (heads, vocab divisibility) on the resolved mesh.
  model::tp_dims(r.dims, r.mesh.tp, 0);
  r.batch = spec.batch.resolved(r.mesh.dp());
  return r;
}

}  // namespace meshtrain::train
