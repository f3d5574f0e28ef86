#pragma once
/// \brief The run resolution: everything decided before a run allocates anything -- the
/// mesh, the strategy (`auto` by the one rule of plan/mesh_search.hpp), the batch split,
/// activation checkpointing -- from the typed RunSpec and the job. Identical on every rank.
/// `train` and `plan` both go through resolve(), so what `plan` shows is what `train` runs.
/// (app/run_spec_resolve.hpp makes the RunSpec from the config and adds the effective
/// configuration text.)

#include <optional>
#include <string>

#include "checkpoint/stored_choices.hpp"
#include "plan/cost_model.hpp"
#include "plan/mesh_search.hpp"
#include "plan/planner.hpp"
#include "plan/run_spec.hpp"
#include "runtime/runtime.hpp"
#include "runtime/topology.hpp"

namespace meshtrain::plan {

/// The job a run is resolved for: this one, or the cluster `plan` is asked about (plan.*).
struct JobShape {
  int world = 1;
  int ranks_per_node = 0;     ///< 0: nodes of different sizes
  double memory_budget = 0;   ///< bytes per rank (memory_budget_per_rank)
  std::string memory_source;  ///< where memory_budget comes from, in words for messages
  bool other_cluster = false; ///< planned from plan.world_size, not this job's ranks
};

/// This job: its world, its nodes when they are all the same size, its budget per rank.
JobShape this_job(const RunSpec& spec, const Topology& topo);
/// What `plan` plans for: the cluster of plan.world_size / plan.gpus_per_node when set,
/// otherwise this job (this_job).
JobShape planned_job(const RunSpec& spec, const Topology& topo);

/// Per-rank memory budget. The cluster `plan` is asked about (planned_job, also on this
/// job's ranks): plan.device_memory, else parallel.memory_limit, else this machine's. This
/// job (train, eval, generate): parallel.memory_limit, else
/// plan.device_memory capped at this machine's, else this machine's -- the device's memory
/// (GPU) or node RAM / ranks per node (CPU).
double memory_budget_per_rank(const RunSpec& spec, const Topology& topo, bool planning_other_cluster);

/// The planner's input for this spec on `job`.
PlanInput plan_input(const RunSpec& spec, const JobShape& job);

struct RunSetup {
  /// The settings as asked: mesh keys at -1, train.micro_batch = 0 and checkpointing left to
  /// the planner stay so; what was chosen is below, once.
  RunSpec spec;
  // -- resolved at start --
  MeshShape mesh_shape;              ///< the mesh this run uses: no -1 left
  parallel::Strategy strategy = parallel::Strategy::FullShard;
  BatchSpec batch;             ///< split for this mesh: micro_batch, seq_len, grad_accum, global_batch
  bool activation_checkpointing = false;
  std::string strategy_reason; ///< why this strategy (and mesh, when searched)
  double memory_budget = 0;    ///< bytes per rank the planner used
  double memory_planned = 0;   ///< bytes per rank the chosen plan needs (MemoryEstimate::total)
  int ranks_per_node = 0;      ///< the job's ranks per node (0: nodes of different sizes), recorded in checkpoints
  /// The effective configuration as INI text (every key; the resolved mesh, micro-batch and
  /// checkpointing in it): logged at start and stored in each checkpoint. record_ini is the
  /// run's config.ini: what was asked, the resolved values as comments. Written by the app
  /// layer; empty in tests.
  std::string config_ini, record_ini;
};

/// A resolution and what it weighed (for `plan` to show).
struct Resolution {
  RunSetup setup;
  PlanInput input;             ///< the planner's input on this job
  bool searched = false;       ///< the mesh was left to the planner (searches_mesh)
  /// The candidates ranked by the `auto` rule: the mesh search's, or every strategy on the
  /// fixed mesh (auto) or the configured one; empty when the cost model was not consulted.
  MeshSearch ranking;
  /// Why `train` would refuse this job (nothing fits; a forced strategy that cannot run or
  /// exceeds the memory); empty when it runs. setup's resolved values are meaningless then.
  std::string refusal;
};

/// `kept`: what the checkpoint a run resumes from recorded of its resolved shape
/// (checkpoint/stored_choices.hpp). A resume on the same job shape keeps every choice the
/// spec leaves open (kept_spec), so a restart never re-decides what `auto` chose on a new
/// measurement of the machine.
///
/// Whether `kept` applies to `spec` on `job`: recorded on the same world and ranks per node
/// (a different rank count -- a recovery on the hosts left -- plans afresh), and the spec
/// leaves something open (an auto strategy, a mesh key at -1, micro_batch 0, checkpointing
/// left to a search).
bool keeps(const RunSpec& spec, const JobShape& job, const checkpoint::StoredChoices* kept);

/// `spec` with everything it leaves open fixed to the checkpoint's choices: strategy, mesh,
/// micro-batch, activation checkpointing. Keys the user gave stay as given.
RunSpec kept_spec(const RunSpec& spec, const checkpoint::StoredChoices& kept);

/// Whether resolving `spec` on `job` needs the cost model's inputs: the mesh is left to the
/// planner, or `auto` chooses among strategies whose step times differ (more than one rank);
/// never when a checkpoint's choices are kept (keeps()).
bool needs_costs(const RunSpec& spec, const JobShape& job, const checkpoint::StoredChoices* kept = nullptr);

/// Resolves `spec` on `job`. `costs` must be given when needs_costs(); when given otherwise
/// (plan), the resolution also ranks the strategies by it. With `kept` choices that apply
/// (keeps()), the checkpoint's choices are taken when they still fit (strategy_reason "auto:
/// kept from the checkpoint ..."); choices that no longer fit (a smaller memory limit) are
/// planned afresh, which then needs `costs` -- the caller passes them when it has them.
/// UserError for a setting that is wrong whatever the memory (a seq_len over max_seq_len, an
/// impossible mesh); what does not fit is `refusal`.
Resolution resolve(const RunSpec& spec, const JobShape& job, const CostModelInputs* costs,
                   const checkpoint::StoredChoices* kept = nullptr);

/// resolve() on this job, as `train` runs it: UserError with the refusal, a warning when a
/// forced strategy may not fit.
RunSetup resolve_run(const RunSpec& spec, const Topology& topo, const CostModelInputs* costs = nullptr,
                     const checkpoint::StoredChoices* kept = nullptr);

/// resolve_run for this live job: the cost model's inputs, when needed, come from plan.* or
/// are measured here (collective: every rank calls it); `kept` choices that apply are taken
/// without measuring.
RunSetup resolve_run(const RunSpec& spec, const Runtime& rt, const checkpoint::StoredChoices* kept = nullptr);

}  // namespace meshtrain::plan
