#pragma once
/// \brief Everything decided before a run allocates anything: model dimensions, the mesh,
/// the strategy (auto resolved by the planner), batch arithmetic. Identical on every rank.

#include <string>

#include "meshtrain/config/config.hpp"
#include "meshtrain/model/model_dims.hpp"
#include "meshtrain/parallel/planner.hpp"
#include "meshtrain/runtime/topology.hpp"
#include "meshtrain/train/cost_model.hpp"

namespace meshtrain::train {

struct RunSetup {
  Config config;
  model::ModelDims dims;
  MeshShape mesh;
  parallel::Strategy strategy = parallel::Strategy::FullShard;
  std::string strategy_reason;
  int grad_accum = 1;
  int global_batch = 1;        ///< sequences per optimizer step
  bool bf16 = false;
  parallel::Plan plan;         ///< every strategy's estimate (for logs and `plan`)
  double memory_budget = 0;    ///< bytes per rank used by the planner
};

/// Per-rank memory budget: parallel.device_memory / parallel.memory_limit when set,
/// otherwise the device's memory (GPU) or node RAM / ranks per node (CPU).
double memory_budget_per_rank(const Config& cfg, const Topology& topo, bool planning_other_cluster);

/// The planner's input for this config on `world` ranks with `ranks_per_node`.
parallel::PlanInput plan_input(const Config& cfg, const model::ModelDims& dims, int world, int ranks_per_node,
                               double memory_budget);

/// Resolves the run for `world` ranks (UserError with the fix for anything impossible).
/// When the config leaves the mesh to the planner (train::searches_mesh), `costs` must be
/// given: the fastest predicted candidate that fits is taken, and its mesh, micro-batch and
/// checkpointing are written into RunSetup::config.
RunSetup resolve_run(const Config& cfg, const Topology& topo, const CostModelInputs* costs = nullptr);

/// resolve_run for this live job: the cost model's inputs, when the planner needs them, come
/// from parallel.target_* or are measured here (collective: every rank calls it).
RunSetup resolve_run(const Config& cfg, const Runtime& rt);

}  // namespace meshtrain::train
