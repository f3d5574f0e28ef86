#pragma once
/// \brief Everything decided before a run allocates anything: model dimensions, the mesh,
/// the strategy (auto resolved by the planner), batch arithmetic. Identical on every rank.
/// Made from the typed RunSpec (app/run_spec_resolve.hpp makes both from the config).

#include <string>

#include "meshtrain/model/model_dims.hpp"
#include "meshtrain/parallel/planner.hpp"
#include "meshtrain/runtime/topology.hpp"
#include "meshtrain/train/cost_model.hpp"
#include "meshtrain/train/run_spec.hpp"

namespace meshtrain::train {

struct RunSetup {
  /// The settings, with the planner's choices written in when it searched the mesh
  /// (parallel.mesh, batch.micro_batch, train.activation_checkpointing).
  RunSpec spec;
  /// The effective configuration as INI text (every key; the planner's choices in it): logged
  /// at start and stored in each checkpoint. record_ini is the same with train.grad_accum as
  /// resolved (the run record's config.ini). Written by the app layer; empty in tests.
  std::string config_ini, record_ini;
  model::ModelDims dims;       ///< = spec.dims
  MeshShape mesh;              ///< resolved: no -1 left
  parallel::Strategy strategy = parallel::Strategy::FullShard;
  std::string strategy_reason;
  BatchSpec batch;             ///< resolved for this mesh: micro_batch, seq_len, grad_accum, global_batch
  bool bf16 = false;
  parallel::Plan plan;         ///< every strategy's estimate (for logs and `plan`)
  double memory_budget = 0;    ///< bytes per rank used by the planner
};

/// Per-rank memory budget: plan.device_memory / parallel.memory_limit when set, otherwise
/// the device's memory (GPU) or node RAM / ranks per node (CPU).
double memory_budget_per_rank(const RunSpec& spec, const Topology& topo, bool planning_other_cluster);

/// The planner's input for this spec on `world` ranks with `ranks_per_node`.
parallel::PlanInput plan_input(const RunSpec& spec, int world, int ranks_per_node, double memory_budget);

/// Resolves the run for `world` ranks (UserError with the fix for anything impossible).
/// When the spec leaves the mesh to the planner (train::searches_mesh), `costs` must be
/// given: the fastest predicted candidate that fits is taken, and its mesh, micro-batch and
/// checkpointing are written into RunSetup::spec.
RunSetup resolve_run(const RunSpec& spec, const Topology& topo, const CostModelInputs* costs = nullptr);

/// resolve_run for this live job: the cost model's inputs, when the planner needs them, come
/// from plan.* or are measured here (collective: every rank calls it).
RunSetup resolve_run(const RunSpec& spec, const Runtime& rt);

}  // namespace meshtrain::train
