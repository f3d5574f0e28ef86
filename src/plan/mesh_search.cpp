#include "plan/mesh_search.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/format.hpp"

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
  // A forward pass (eval, generate) keeps nothing to recompute.
  if (spec.use != ModelUse::Train) s.activation_checkpointing = {false};
  else if (spec.train.activation_checkpointing || !searches_mesh(spec)) s.activation_checkpointing = {spec.train.activation_checkpointing};
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

/// The fixed order of the strategies, least communication first (doc/training.md).
int strategy_order(parallel::Strategy st) {
  switch (st) {
    case parallel::Strategy::NoShard: return 0;
    case parallel::Strategy::ShardGradOp: return 1;
    case parallel::Strategy::HybridShard: return 2;
    case parallel::Strategy::FullShard: return 3;
  }
  return 4;
}

/// The same mesh, micro-batch and checkpointing: candidates that differ in the strategy alone.
bool same_shape(const Candidate& a, const Candidate& b) {
  const MeshShape &x = a.plan.mesh_shape, &y = b.plan.mesh_shape;
  return x.dp_replicate == y.dp_replicate && x.dp_shard == y.dp_shard && x.tp == y.tp &&
         a.plan.batch.micro_batch == b.plan.batch.micro_batch &&
         a.plan.activation_checkpointing == b.plan.activation_checkpointing;
}

/// The tie-break inside the margin, from the plans alone (no measurement): fewer bytes per
/// step (within 1% as equal: no_shard's all-reduce and shard_grad_op's reduce-scatter +
/// all-gather move the same), then the fixed strategy order.
bool tie_break_before(const Candidate& a, const Candidate& b) {
  const double x = a.plan.comm.total(), y = b.plan.comm.total();
  if (std::abs(x - y) > 0.01 * std::max(x, y)) return x < y;
  return strategy_order(a.plan.strategy) < strategy_order(b.plan.strategy);
}

/// The `auto` rule (mesh_search.hpp), the same for a search and a fixed mesh: fastest
/// predicted first (identical predictions: fewer bytes first, then the enumeration order --
/// the stable sort); the pick is the fastest that fits, unless a strategy on its mesh (same
/// micro-batch and checkpointing) predicts within kStrategyTieMargin of it and comes first
/// by tie_break_before.
void rank(MeshSearch& out, const PlanInput& in) {
  std::stable_sort(out.candidates.begin(), out.candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.pred.step_seconds_overlap != b.pred.step_seconds_overlap)
      return a.pred.step_seconds_overlap < b.pred.step_seconds_overlap;
    return a.plan.comm.total() < b.plan.comm.total();
  });
  int fastest = -1;
  for (std::size_t i = 0; i < out.candidates.size(); ++i)
    if (out.candidates[i].plan.fits) {
      fastest = static_cast<int>(i);
      break;
    }
  out.chosen = fastest;
  if (fastest >= 0) {
    const Candidate& f = out.candidates[fastest];
    const double limit = f.pred.step_seconds_overlap * (1.0 + kStrategyTieMargin);
    for (std::size_t i = fastest + 1; i < out.candidates.size(); ++i) {
      const Candidate& c = out.candidates[i];
      if (c.pred.step_seconds_overlap > limit) break;  // sorted: the rest are slower still
      if (c.plan.fits && same_shape(c, f) && tie_break_before(c, out.candidates[out.chosen]))
        out.chosen = static_cast<int>(i);
    }
  }
  const double usable = in.memory_budget * (1.0 - in.headroom);
  if (out.candidates.empty()) {
    out.reason = "no mesh is possible for this job: the global batch must split into micro-batches over the "
                 "data-parallel ranks, and tensor parallelism must divide the heads and the node";
  } else if (out.chosen < 0) {
    out.reason = strprintf("nothing fits in %s per rank: the smallest candidate needs %s; %s",
                           format_bytes(usable).c_str(),
                           format_bytes(std::min_element(out.candidates.begin(), out.candidates.end(),
                                                         [](const Candidate& a, const Candidate& b) {
                                                           return a.plan.memory.total() < b.plan.memory.total();
                                                         })->plan.memory.total())
                               .c_str(),
                           in.forward_only() ? forward_memory_settings(in).c_str()
                                             : "add ranks, use bf16, or train.activation_checkpointing=true");
  } else {
    const Candidate& w = out.candidates[out.chosen];
    // eval and generate are ranked by one forward pass (cost_model.hpp: predict_step).
    const char* what = in.use == ModelUse::Generate ? "forward pass per generated token"
                       : in.use == ModelUse::Evaluate ? "forward pass of the eval batch"
                                                       : "step";
    // A generated token's forward takes microseconds: three significant digits, not three decimals.
    const std::string seconds = strprintf(in.forward_only() ? "%.3g s" : "%.3f s", w.pred.step_seconds_overlap);
    out.reason = strprintf("fastest predicted %s that fits: %s, %s of %s usable per rank", what, seconds.c_str(),
                           format_bytes(w.plan.memory.total()).c_str(), format_bytes(usable).c_str());
    int ahead_not_fitting = 0;  // faster, or as fast and moving fewer bytes, but too large
    for (int i = 0; i < fastest; ++i) ahead_not_fitting += !out.candidates[i].plan.fits;
    if (ahead_not_fitting > 0)
      out.reason += strprintf("; %d candidate(s) at least as fast do not fit (the first, %.3f s, needs %s)", ahead_not_fitting,
                              out.candidates[0].pred.step_seconds_overlap,
                              format_bytes(out.candidates[0].plan.memory.total()).c_str());
    if (out.chosen != fastest) {
      const Candidate& f = out.candidates[fastest];
      const bool fewer_bytes = std::abs(w.plan.comm.total() - f.plan.comm.total()) >
                               0.01 * std::max(w.plan.comm.total(), f.plan.comm.total());
      out.reason += strprintf("; %s on the same mesh predicts %.1f%% faster, within the %.0f%% tie margin, where %s "
                              "wins by %s",
                              parallel::strategy_name(f.plan.strategy),
                              100.0 * (1.0 - f.pred.step_seconds_overlap / w.pred.step_seconds_overlap),
                              100.0 * kStrategyTieMargin, parallel::strategy_name(w.plan.strategy),
                              fewer_bytes ? "moving fewer bytes" : "the strategy order (both move the same bytes)");
    } else {
      for (std::size_t i = out.chosen + 1; i < out.candidates.size(); ++i)
        if (out.candidates[i].plan.fits) {
          out.reason += strprintf("; the runner-up is %.1f%% slower", 100.0 * (out.candidates[i].pred.step_seconds_overlap /
                                                                                 w.pred.step_seconds_overlap - 1.0));
          break;
        }
    }
  }
}

}  // namespace

MeshSearch search_meshes(const PlanInput& base, const SearchSpace& space, const CostModelInputs& costs) {
  MeshSearch out;
  for (parallel::Strategy s : space.strategies) {
    for (const MeshShape& shape : candidate_mesh_shapes(base, s)) {
      for (bool ac : space.activation_checkpointing) {
        for (int mb : space.micro_batches) {
          PlanInput in = base;
          in.activation_checkpointing = ac;
          in.batch.micro_batch = mb;
          Candidate c;
          c.plan = plan_strategy(in, s, shape);
          if (!c.plan.valid) continue;  // the global batch does not split over this dp x micro-batch
          c.pred = predict_step(in, c.plan, costs);
          out.candidates.push_back(std::move(c));
        }
      }
    }
  }
  rank(out, base);
  return out;
}

MeshSearch rank_strategies(const PlanInput& in, const std::vector<parallel::Strategy>& strategies,
                           const CostModelInputs& costs) {
  MeshSearch out;
  for (const StrategyPlan& p : plan_each_strategy(in)) {
    if (!p.valid || std::find(strategies.begin(), strategies.end(), p.strategy) == strategies.end()) continue;
    out.candidates.push_back({p, predict_step(in, p, costs)});
  }
  rank(out, in);
  return out;
}

}  // namespace meshtrain::plan
