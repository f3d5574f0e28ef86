// The `auto` rule's stability, on fixed tables of machine measurements (nothing measured):
// the strategy tie margin makes the pick independent of a perturbation of the measurement
// that stays within it, a mesh search and a fixed mesh pick the same strategy on the same
// mesh, and a resume on the job shape its checkpoint was written on keeps the checkpoint's
// choices whatever the measurement says (doc/training.md, "What auto decides").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/run_spec_resolve.hpp"
#include "plan/mesh_search.hpp"
#include "plan/run_setup.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {

/// The tiny GPT-2 of the batch tests (d_model 64, 2 layers, micro-batch 2 x 32 tokens, 8
/// sequences per step), strategy auto, on the mesh `request`.
RunSpec tiny_spec(const MeshRequest& request) {
  Config c = test::tiny_model_config("gpt2");
  c.train.micro_batch = 2;
  c.train.global_batch = 8;
  RunSpec s = app::resolve_spec(c);
  s.parallel.strategy = StrategyChoice::Auto;
  s.parallel.mesh_request = request;
  return s;
}

/// Two ranks on one node, 8 GiB each: every strategy fits.
JobShape two_ranks() {
  JobShape j;
  j.world = 2;
  j.ranks_per_node = 2;
  j.memory_budget = 8.0 * 1073741824.0;
  return j;
}

/// A host as the start-up measurement sees it (MPI collectives, links fast enough that the
/// tiny model's communication mostly hides): no_shard and shard_grad_op predict within a
/// few percent, shard_grad_op ahead by its smaller AdamW share where the overlap is high.
/// Each argument scales one measured figure.
CostModelInputs host_table(double bus_f = 1, double adamw_f = 1, double overlap = 0.8, double gemm_f = 1) {
  CostModelInputs c;
  c.gemm_flops = 3e10 * gemm_f;
  c.model_gemm_flops = 1.1e11 * gemm_f;
  c.copy_bytes = 3e9;
  c.adamw_s_per_elem = 2e-9 * adamw_f;
  c.activation_s_per_elem = 1e-9;
  c.intra_bus_bytes = c.inter_bus_bytes = 5e9 * bus_f;
  c.latency_s = 5e-6 / bus_f;
  c.mpi_collectives = true;
  c.overlap = overlap;
  return c;
}

/// Perturbations of the table: links and AdamW rate by up to 30%, the overlap 0.6 .. 1, the
/// GEMM rate by 10%.
std::vector<CostModelInputs> perturbed_tables() {
  std::vector<CostModelInputs> out;
  for (double b : {0.8, 1.0, 1.25})
    for (double a : {0.7, 1.0, 1.3})
      for (double o : {0.6, 0.8, 1.0})
        for (double g : {0.9, 1.1}) out.push_back(host_table(b, a, o, g));
  return out;
}

/// The largest relative gap between the fastest fitting candidate and the other fitting
/// strategies on its mesh.
double same_mesh_spread(const MeshSearch& ms) {
  const Candidate* fastest = nullptr;
  for (const Candidate& c : ms.candidates)
    if (c.plan.fits && (!fastest || c.pred.step_seconds_overlap < fastest->pred.step_seconds_overlap)) fastest = &c;
  double spread = 0;
  for (const Candidate& c : ms.candidates)
    if (c.plan.fits && c.plan.mesh_shape.dp_shard == fastest->plan.mesh_shape.dp_shard && c.plan.mesh_shape.tp == fastest->plan.mesh_shape.tp &&
        c.plan.mesh_shape.dp_replicate == fastest->plan.mesh_shape.dp_replicate)
      spread = std::max(spread, c.pred.step_seconds_overlap / fastest->pred.step_seconds_overlap - 1.0);
  return spread;
}

parallel::Strategy raw_fastest(const MeshSearch& ms) {
  for (const Candidate& c : ms.candidates)
    if (c.plan.fits) return c.plan.strategy;  // candidates are sorted fastest first
  return parallel::Strategy::FullShard;
}

}  // namespace

// Within the margin the pick comes from the plans alone: no_shard and shard_grad_op move the
// same bytes, so the fixed order decides, however the perturbation orders their predictions.
TEST(AutoRule, FixedMeshPickIgnoresPerturbationsWithinTheMargin) {
  const RunSpec spec = tiny_spec({1, -1, 1});
  const PlanInput in = plan_input(spec, two_ranks());
  int within = 0, no_shard_raw_first = 0, other_raw_first = 0;
  for (const CostModelInputs& t : perturbed_tables()) {
    const MeshSearch ms = rank_strategies(in, search_space(spec).strategies, t);
    ASSERT_GE(ms.chosen, 0) << ms.reason;
    if (same_mesh_spread(ms) >= kStrategyTieMargin) continue;
    ++within;
    EXPECT_EQ(ms.candidates[ms.chosen].plan.strategy, parallel::Strategy::NoShard) << ms.reason;
    (raw_fastest(ms) == parallel::Strategy::NoShard ? no_shard_raw_first : other_raw_first) += 1;
  }
  // The perturbations do reorder the raw predictions inside the margin: without the tie
  // rule the pick would have followed them.
  EXPECT_GT(within, 0);
  EXPECT_GT(other_raw_first, 0) << "no perturbation put another strategy ahead: the test does not exercise the margin";
}

// One rule: where the mesh search lands on a mesh, auto on that fixed mesh picks the same
// strategy (plan's "with nothing fixed" line and a fixed-mesh auto agree).
TEST(AutoRule, SearchAndFixedMeshPickTheSameStrategyOnTheSameMesh) {
  const RunSpec searched = tiny_spec({-1, -1, -1});
  for (const CostModelInputs& t : perturbed_tables()) {
    const Resolution s = resolve(searched, two_ranks(), &t);
    ASSERT_TRUE(s.refusal.empty()) << s.refusal;
    const MeshShape m = s.setup.mesh_shape;
    const Resolution f = resolve(tiny_spec({m.dp_replicate, m.dp_shard, m.tp}), two_ranks(), &t);
    ASSERT_TRUE(f.refusal.empty()) << f.refusal;
    EXPECT_EQ(f.setup.strategy, s.setup.strategy) << "search: " << s.setup.strategy_reason
                                                  << "\nfixed: " << f.setup.strategy_reason;
  }
}

namespace {

/// What a checkpoint of the tiny run recorded: shard_grad_op on 1 x 2 x 1, 2 ranks on one node.
checkpoint::StoredChoices stored_choices_of_tiny_run() {
  checkpoint::StoredChoices k;
  k.recorded = true;
  k.path = "/runs/x/checkpoints/step_00000004.h5";
  k.world_size = 2;
  k.ranks_per_node = 2;
  k.mesh_shape = {1, 2, 1};
  k.strategy = parallel::Strategy::ShardGradOp;
  k.micro_batch = 2;
  return k;
}

}  // namespace

// A resume on the checkpoint's job shape keeps its strategy under any measurement, and needs
// none; the setup still holds the settings as asked.
TEST(AutoRule, ResumeOnTheSameJobShapeKeepsTheCheckpointsChoice) {
  const RunSpec spec = tiny_spec({1, -1, 1});
  const checkpoint::StoredChoices k = stored_choices_of_tiny_run();
  EXPECT_TRUE(keeps(spec, two_ranks(), &k));
  EXPECT_FALSE(needs_costs(spec, two_ranks(), &k));
  EXPECT_TRUE(needs_costs(spec, two_ranks(), nullptr));
  const Resolution unmeasured = resolve(spec, two_ranks(), nullptr, &k);
  ASSERT_TRUE(unmeasured.refusal.empty()) << unmeasured.refusal;
  EXPECT_EQ(unmeasured.setup.strategy, parallel::Strategy::ShardGradOp);
  EXPECT_EQ(unmeasured.setup.strategy_reason.rfind("auto: kept from the checkpoint " + k.path, 0), 0u)
      << unmeasured.setup.strategy_reason;
  EXPECT_EQ(unmeasured.setup.spec.parallel.strategy, StrategyChoice::Auto);
  EXPECT_EQ(unmeasured.setup.spec.parallel.mesh_request.dp_shard, -1);
  for (const CostModelInputs& t : perturbed_tables()) {
    const Resolution r = resolve(spec, two_ranks(), &t, &k);
    ASSERT_TRUE(r.refusal.empty()) << r.refusal;
    EXPECT_EQ(r.setup.strategy, parallel::Strategy::ShardGradOp);
    EXPECT_EQ(r.setup.mesh_shape.dp_shard, 2);
    EXPECT_EQ(r.setup.batch.micro_batch, 2);
    EXPECT_EQ(r.setup.batch.grad_accum, 2);
  }
}

// Everything the search chose is kept: mesh, micro-batch and checkpointing.
TEST(AutoRule, ResumeKeepsTheSearchedMeshMicroBatchAndCheckpointing) {
  RunSpec spec = tiny_spec({-1, -1, -1});
  spec.batch.micro_batch = 0;
  checkpoint::StoredChoices k = stored_choices_of_tiny_run();
  k.mesh_shape = {1, 1, 2};
  k.strategy = parallel::Strategy::FullShard;
  k.micro_batch = 4;
  k.activation_checkpointing = true;
  const Resolution r = resolve(spec, two_ranks(), nullptr, &k);
  ASSERT_TRUE(r.refusal.empty()) << r.refusal;
  EXPECT_EQ(r.setup.strategy, parallel::Strategy::FullShard);
  EXPECT_EQ(r.setup.mesh_shape.tp, 2);
  EXPECT_EQ(r.setup.batch.micro_batch, 4);
  EXPECT_EQ(r.setup.batch.grad_accum, 2);
  EXPECT_TRUE(r.setup.activation_checkpointing);
  EXPECT_EQ(r.setup.spec.batch.micro_batch, 0);  // as asked
}

// Another job shape (a recovery on the hosts left), or a key the user now fixes otherwise,
// plans afresh; so do kept choices that no longer fit.
TEST(AutoRule, AnotherJobShapeOrAChangedKeyPlansAfresh) {
  const RunSpec spec = tiny_spec({1, -1, 1});
  checkpoint::StoredChoices k = stored_choices_of_tiny_run();
  JobShape four = two_ranks();
  four.world = 4;
  four.ranks_per_node = 4;
  EXPECT_FALSE(keeps(spec, four, &k));
  JobShape two_nodes = two_ranks();
  two_nodes.ranks_per_node = 1;
  EXPECT_FALSE(keeps(spec, two_nodes, &k));
  RunSpec forced = spec;
  forced.parallel.strategy = StrategyChoice::FullShard;
  EXPECT_FALSE(keeps(forced, two_ranks(), &k));
  RunSpec other_micro = spec;
  other_micro.batch.micro_batch = 1;
  EXPECT_FALSE(keeps(other_micro, two_ranks(), &k));
  // On a fixed mesh checkpointing is the user's key (false here): a checkpoint that ran with
  // it is another request.
  checkpoint::StoredChoices with_checkpointing = k;
  with_checkpointing.activation_checkpointing = true;
  EXPECT_FALSE(keeps(spec, two_ranks(), &with_checkpointing));
  const CostModelInputs t = host_table();
  const Resolution fresh = resolve(spec, four, &t, &k);
  ASSERT_TRUE(fresh.refusal.empty()) << fresh.refusal;
  EXPECT_EQ(fresh.setup.strategy_reason.find("kept"), std::string::npos) << fresh.setup.strategy_reason;
  EXPECT_EQ(fresh.setup.mesh_shape.dp_shard, 4);
  // The checkpoint's strategy no longer fits: a budget between the smallest strategy and it.
  JobShape small = two_ranks();
  const std::vector<StrategyPlan> each = plan_each_strategy(plan_input(spec, small));
  const StrategyPlan* largest = nullptr;
  const StrategyPlan* smallest = nullptr;
  for (const StrategyPlan& p : each) {
    if (!p.valid) continue;
    if (!largest || p.memory.total() > largest->memory.total()) largest = &p;
    if (!smallest || p.memory.total() < smallest->memory.total()) smallest = &p;
  }
  ASSERT_TRUE(largest && smallest && largest->memory.total() > smallest->memory.total());
  k.strategy = largest->strategy;
  small.memory_budget =
      (largest->memory.total() + smallest->memory.total()) / 2 / (1.0 - spec.parallel.memory_headroom);
  const Resolution refit = resolve(spec, small, &t, &k);
  ASSERT_TRUE(refit.refusal.empty()) << refit.refusal;
  EXPECT_NE(refit.setup.strategy, largest->strategy);
  EXPECT_EQ(refit.setup.strategy_reason.find("kept"), std::string::npos) << refit.setup.strategy_reason;
}
