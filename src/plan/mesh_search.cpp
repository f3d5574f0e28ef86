#include "meshtrain/plan/mesh_search.hpp"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.hpp"
#include "meshtrain/core/format.hpp"

namespace meshtrain::plan {

bool searches_mesh(const RunSpec& spec) {
  return spec.parallel.free_degrees() >= 2 || spec.batch.micro_batch == 0;
}

SearchSpace search_space(const RunSpec& spec) {
  SearchSpace s;
  if (spec.parallel.strategy == StrategyChoice::Auto)
    s.strategies = {parallel::Strategy::NoShard, parallel::Strategy::ShardGradOp, parallel::Strategy::HybridShard,
                    parallel::Strategy::FullShard};
  else
    s.strategies = {parallel::forced_strategy(spec.parallel.strategy)};
  // Checkpointing only ever costs time (a second forward), so the search turns it on only
  // where a candidate would not fit without it; `true` forces it.
  if (spec.train.activation_checkpointing || !searches_mesh(spec)) s.activation_checkpointing = {spec.train.activation_checkpointing};
  else s.activation_checkpointing = {false, true};
  if (spec.batch.micro_batch > 0) {
    s.micro_batches = {spec.batch.micro_batch};
  } else {
    MESHTRAIN_REQUIRE(spec.batch.global_batch > 0,
                      "train.micro_batch=0 (auto) needs train.global_batch, so that the planner's choice of "
                      "micro-batch leaves the optimisation unchanged; set train.global_batch");
    for (int mb = 1; mb <= std::min(64, spec.batch.global_batch); ++mb)
      if (spec.batch.global_batch % mb == 0) s.micro_batches.push_back(mb);
  }
  return s;
}

namespace {

/// On a fixed mesh `auto` weighs the strategies on this job's measured machine, and their
/// predictions are often a few percent apart (on one node the communication hides behind
/// compute): predictions closer than this count as equal, so that a near-tie is less likely
/// to follow the start-up measurement's noise (it still can, on a busy machine: a known gap,
/// doc/training.md). The mesh search keeps exact ties only: its candidates differ by more.
constexpr double kFixedMeshTieMargin = 0.05;

/// The `auto` rule's order: fastest predicted first. Ties -- identical predictions, where
/// the model hides all communication behind compute -- go to the candidate that moves fewer
/// bytes per step (should the overlap be less than predicted, it stays the faster), then
/// keep the enumeration order (strategies least communication first; the stable sort).
void rank(MeshSearch& out, const PlanInput& in, double tie_margin) {
  std::stable_sort(out.candidates.begin(), out.candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.pred.step_seconds_overlap != b.pred.step_seconds_overlap)
      return a.pred.step_seconds_overlap < b.pred.step_seconds_overlap;
    return a.plan.comm.total() < b.plan.comm.total();
  });
  for (std::size_t i = 0; i < out.candidates.size(); ++i)
    if (out.candidates[i].plan.fits) {
      out.chosen = static_cast<int>(i);
      break;
    }
  // Within `tie_margin` of the fastest that fits, the candidate that moves fewer bytes wins
  // (then the enumeration order): see kFixedMeshTieMargin.
  if (out.chosen >= 0 && tie_margin > 0) {
    const double limit = out.candidates[out.chosen].pred.step_seconds_overlap * (1.0 + tie_margin);
    int best = out.chosen;
    // Fewer bytes first (within 1%, as equal: no_shard's all-reduce and shard_grad_op's
    // reduce-scatter + all-gather move the same), then the fixed strategy order -- never the
    // sorted position, which the measurement decides.
    const auto before = [](const Candidate& a, const Candidate& b) {
      const double x = a.plan.comm.total(), y = b.plan.comm.total();
      if (std::abs(x - y) > 0.01 * std::max(x, y)) return x < y;
      const auto order = [](parallel::Strategy st) {  // least communication first (doc/training.md)
        switch (st) {
          case parallel::Strategy::NoShard: return 0;
          case parallel::Strategy::ShardGradOp: return 1;
          case parallel::Strategy::HybridShard: return 2;
          case parallel::Strategy::FullShard: return 3;
        }
        return 4;
      };
      return order(a.plan.strategy) < order(b.plan.strategy);
    };
    for (std::size_t i = out.chosen + 1; i < out.candidates.size(); ++i) {
      const Candidate& c = out.candidates[i];
      if (c.pred.step_seconds_overlap > limit) break;  // sorted: the rest are slower still
      if (c.plan.fits && before(c, out.candidates[best])) best = static_cast<int>(i);
    }
    out.chosen = best;
  }
  const double usable = in.memory_budget * (1.0 - in.headroom);
  if (out.candidates.empty()) {
    out.reason = "no mesh is possible for this job: the global batch must split into micro-batches over the "
                 "data-parallel ranks, and tensor parallelism must divide the heads and the node";
  } else if (out.chosen < 0) {
    out.reason = strprintf("nothing fits in %s per rank: the smallest candidate needs %s; add ranks, use bf16, or "
                           "train.activation_checkpointing=true",
                           format_bytes(usable).c_str(),
                           format_bytes(std::min_element(out.candidates.begin(), out.candidates.end(),
                                                         [](const Candidate& a, const Candidate& b) {
                                                           return a.plan.memory.total() < b.plan.memory.total();
                                                         })->plan.memory.total())
                               .c_str());
  } else {
    const Candidate& w = out.candidates[out.chosen];
    out.reason = strprintf("fastest predicted step that fits: %.3f s, %s of %s usable per rank", w.pred.step_seconds_overlap,
                           format_bytes(w.plan.memory.total()).c_str(), format_bytes(usable).c_str());
    int ahead_not_fitting = 0;  // faster, or as fast and moving fewer bytes, but too large
    for (int i = 0; i < out.chosen; ++i) ahead_not_fitting += !out.candidates[i].plan.fits;
    if (ahead_not_fitting > 0)
      out.reason += strprintf("; %d candidate(s) at least as fast do not fit (the first, %.3f s, needs %s)", ahead_not_fitting,
                              out.candidates[0].pred.step_seconds_overlap,
                              format_bytes(out.candidates[0].plan.memory.total()).c_str());
    for (std::size_t i = out.chosen + 1; i < out.candidates.size(); ++i)
      if (out.candidates[i].plan.fits) {
        out.reason += strprintf("; the runner-up is %.1f%% slower", 100.0 * (out.candidates[i].pred.step_seconds_overlap /
                                                                               w.pred.step_seconds_overlap - 1.0));
        break;
      }
  }
}

}  // namespace

MeshSearch search_meshes(const PlanInput& base, const SearchSpace& space, const CostModelInputs& costs) {
  MeshSearch out;
  for (parallel::Strategy s : space.strategies) {
    for (const MeshShape& mesh : candidate_meshes(base, s)) {
      for (bool ac : space.activation_checkpointing) {
        for (int mb : space.micro_batches) {
          PlanInput in = base;
          in.activation_checkpointing = ac;
          in.batch.micro_batch = mb;
          Candidate c;
          c.plan = plan_strategy(in, s, mesh);
          if (!c.plan.valid) continue;  // the global batch does not split over this dp x micro-batch
          c.pred = predict_step(in, c.plan, costs);
          out.candidates.push_back(std::move(c));
        }
      }
    }
  }
  rank(out, base, 0.0);
  return out;
}

MeshSearch rank_strategies(const PlanInput& in, const std::vector<parallel::Strategy>& strategies,
                           const CostModelInputs& costs) {
  MeshSearch out;
  for (const StrategyPlan& p : plan_each_strategy(in)) {
    if (!p.valid || std::find(strategies.begin(), strategies.end(), p.strategy) == strategies.end()) continue;
    out.candidates.push_back({p, predict_step(in, p, costs)});
  }
  rank(out, in, kFixedMeshTieMargin);
  return out;
}

}  // namespace meshtrain::plan
