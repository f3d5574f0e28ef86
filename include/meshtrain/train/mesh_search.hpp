#pragma once
/// \brief The search behind `parallel.strategy = auto` when the mesh is left to the planner:
/// every (strategy, dp_replicate x dp_shard x tp, activation checkpointing, micro-batch) the
/// job allows, its memory (the planner) and step time (the cost model); the fastest that
/// fits wins.

#include <string>
#include <vector>

#include "meshtrain/parallel/planner.hpp"
#include "meshtrain/train/cost_model.hpp"
#include "meshtrain/train/run_spec.hpp"

namespace meshtrain::train {

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
  parallel::StrategyPlan plan;  ///< memory, mesh, micro-batch, checkpointing
  StepPrediction pred;
};

struct MeshSearch {
  std::vector<Candidate> candidates;  ///< every valid candidate, fastest first
  int chosen = -1;                    ///< index of the fastest that fits, -1 if none fits
  std::string reason;                 ///< why it won (or why nothing fits)
};

/// Enumerates the space on `in` (its mesh request's fixed keys kept) and ranks it.
MeshSearch search_meshes(const model::ModelDims& dims, const parallel::PlanInput& in, const SearchSpace& space,
                         const CostModelInputs& costs);

}  // namespace meshtrain::train
