#pragma once
/// \brief The one rule behind `parallel.strategy = auto`: of the candidates the job allows,
/// the fastest predicted step (plan/cost_model.hpp) that fits in memory (plan/planner.hpp),
/// with one tie rule that uses the plans alone, never the measurement: a strategy on the
/// same mesh (same micro-batch and checkpointing) whose prediction is within
/// kStrategyTieMargin of the fastest counts as tied with it, and of tied candidates the one
/// that moves fewer bytes per step wins (should the overlap be less than predicted, it stays
/// the faster), then the fixed strategy order no_shard, shard_grad_op, hybrid_shard,
/// full_shard. Identical predictions of other shapes keep the enumeration order (strategies
/// in that order, then meshes by tp and dp_replicate ascending, checkpointing off before on,
/// smaller micro-batches first). The candidates are every (strategy, dp_replicate x dp_shard
/// x tp, activation checkpointing, micro-batch) when the mesh is left to the planner
/// (search_meshes), or every strategy on the configured mesh (rank_strategies); the rule is
/// the same, so a search and a fixed mesh pick the same strategy on the same mesh.

#include <string>
#include <vector>

#include "plan/cost_model.hpp"
#include "plan/planner.hpp"
#include "plan/run_spec.hpp"

namespace meshtrain::plan {

/// Predictions of strategies on one mesh closer than this (relative to the faster) count as
/// equal. On one node the communication mostly hides behind compute, and strategies that
/// differ only in how they shard predict a few percent apart -- less than a busy machine's
/// start-up measurement varies -- so the measurement must not decide between them. Across
/// meshes the candidates differ in their compute too, and the exact order stands.
constexpr double kStrategyTieMargin = 0.05;

/// What the search may vary; a key the user fixed is a list of one.
struct SearchSpace {
  std::vector<parallel::Strategy> strategies;
  std::vector<bool> activation_checkpointing;
  std::vector<int> micro_batches;
};

/// The space a spec leaves open: parallel.strategy (auto: all four), the mesh keys at -1
/// (in PlanInput::mesh), activation checkpointing (train.activation_checkpointing = auto:
/// both), the micro-batch (train.micro_batch = auto: every divisor of the sequences per
/// data-parallel rank, up to 64).
SearchSpace search_space(const RunSpec& spec);

/// Whether the spec asks the planner to choose more than the strategy: two or more mesh
/// keys at -1, or train.activation_checkpointing / train.micro_batch = auto.
bool searches_mesh(const RunSpec& spec);

struct Candidate {
  StrategyPlan plan;  ///< memory, mesh, batch split, checkpointing
  StepPrediction pred;
};

/// Candidates ranked by the `auto` rule, and its pick.
struct MeshSearch {
  std::vector<Candidate> candidates;  ///< every valid candidate, fastest first
  int chosen = -1;                    ///< index of the fastest that fits, -1 if none fits
  std::string reason;                 ///< why it won (or why nothing fits)
};

/// Enumerates the space on `in` (its mesh request's fixed keys kept) and ranks it.
MeshSearch search_meshes(const PlanInput& in, const SearchSpace& space, const CostModelInputs& costs);

/// Every strategy of `strategies` on the mesh it runs on for `in`'s request
/// (mesh_shape_for_strategy), ranked by the same rule.
MeshSearch rank_strategies(const PlanInput& in, const std::vector<parallel::Strategy>& strategies,
                           const CostModelInputs& costs);

}  // namespace meshtrain::plan
