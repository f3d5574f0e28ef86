// The mesh search behind strategy=auto with the mesh left at -1: the pick is the fastest
// predicted candidate that fits, fixed keys restrict the space, checkpointing is only
// turned on where it is needed to fit, and nothing fitting is a clear error.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "plan/mesh_search.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {

RunSpec llama_8b(int world) {
  model::ModelSettings m;
  m.family = ModelFamily::Llama;
  m.vocab_size = 128256;
  m.d_model = 4096;
  m.n_layers = 32;
  m.n_heads = 32;
  m.n_kv_heads = 8;
  m.ffn_dim = 14336;
  m.max_seq_len = 8192;
  m.tie_embeddings = false;
  RunSpec s;
  s.dims = model::resolve_dims(m);
  s.parallel.mesh_request = {-1, -1, -1};
  s.batch.micro_batch = 1;
  s.batch.seq_len = 8192;
  s.batch.global_batch = world;
  s.train.precision = Precision::Bf16;
  return s;
}

CostModelInputs h100ish() {
  CostModelInputs c;
  c.gemm_flops = 700e12;
  c.copy_bytes = 3000e9;
  c.intra_bus_bytes = 150e9;
  c.inter_bus_bytes = 25e9;
  return c;
}

MeshSearch run(const RunSpec& cfg, int world, double gib) {
  const model::ModelDims d = cfg.dims;
  plan::PlanInput in;
  in.dims = d;
  in.world = world;
  in.ranks_per_node = 8;
  in.mesh_request = cfg.parallel.mesh_request;
  in.batch.micro_batch = std::max(1, cfg.batch.micro_batch);
  in.batch.seq_len = cfg.batch.seq_len;
  in.batch.global_batch = cfg.batch.global_batch;
  in.bf16 = true;
  in.memory_budget = gib * 1073741824.0;
  return search_meshes(in, search_space(cfg), h100ish());
}

}  // namespace

TEST(MeshSearch, PicksTheFastestCandidateThatFits) {
  const RunSpec cfg = llama_8b(64);
  ASSERT_TRUE(searches_mesh(cfg));
  // 48 GiB devices: the fastest candidates (no checkpointing, no tensor parallelism at 8192
  // tokens) need ~47 GiB of the 40.8 usable.
  const MeshSearch ms = run(cfg, 64, 48);
  ASSERT_GE(ms.chosen, 0) << ms.reason;
  const Candidate& w = ms.candidates[ms.chosen];
  EXPECT_TRUE(w.plan.fits);
  for (const Candidate& c : ms.candidates)
    if (c.plan.fits) EXPECT_GE(c.pred.step_seconds_overlap, w.pred.step_seconds_overlap);
  // Faster candidates exist that do not fit (no checkpointing at 8192 tokens): the search
  // skipped them, and said so.
  EXPECT_GT(ms.chosen, 0);
  EXPECT_FALSE(ms.candidates[0].plan.fits);
  EXPECT_NE(ms.reason.find("do not fit"), std::string::npos) << ms.reason;
  // On 80 GiB devices the fastest candidate fits: the attention keeps two statistics per
  // query row, not the 8192 x 8192 probabilities of every head (4 GiB per block).
  const MeshSearch big = run(cfg, 64, 80);
  EXPECT_EQ(big.chosen, 0) << big.reason;
  EXPECT_FALSE(big.candidates[0].plan.activation_checkpointing);
}

TEST(MeshSearch, FixedKeysRestrictTheSpace) {
  RunSpec cfg = llama_8b(64);
  cfg.parallel.mesh_request.tp = 8;
  cfg.parallel.strategy = StrategyChoice::FullShard;
  const MeshSearch ms = run(cfg, 64, 80);
  ASSERT_FALSE(ms.candidates.empty());
  for (const Candidate& c : ms.candidates) {
    EXPECT_EQ(c.plan.mesh_shape.tp, 8);
    EXPECT_EQ(c.plan.strategy, parallel::Strategy::FullShard);
  }
  // Checkpointing fixed on: every candidate has it.
  cfg.train.activation_checkpointing = true;
  for (const Candidate& c : run(cfg, 64, 80).candidates) EXPECT_TRUE(c.plan.activation_checkpointing);
}

TEST(MeshSearch, MicroBatchAutoKeepsTheGlobalBatch) {
  RunSpec cfg = llama_8b(8);
  cfg.batch.global_batch = 32;
  cfg.batch.micro_batch = 0;  // auto
  const MeshSearch ms = run(cfg, 8, 80);
  bool several = false;
  for (const Candidate& c : ms.candidates) {
    EXPECT_EQ(c.plan.batch.micro_batch * c.plan.mesh_shape.dp() * c.plan.batch.grad_accum, 32);
    several = several || c.plan.batch.micro_batch > 1;
  }
  EXPECT_TRUE(several);
  cfg.batch.global_batch = 0;
  EXPECT_THROW(search_space(cfg), UserError);
}

TEST(MeshSearch, NothingFitsIsAnErrorWithTheFix) {
  const MeshSearch ms = run(llama_8b(8), 8, 4);  // 4 GiB GPUs
  EXPECT_EQ(ms.chosen, -1);
  EXPECT_NE(ms.reason.find("nothing fits"), std::string::npos) << ms.reason;
}

// The one `auto` rule on a fixed mesh: the fastest predicted strategy that fits, whatever
// its communication; least communication decides only between identical predictions.
TEST(MeshSearch, FixedMeshAutoTakesTheFastestThatFitsAndBreaksTiesByBytes) {
  RunSpec cfg = llama_8b(64);
  cfg.parallel.mesh_request = {1, -1, 1};
  plan::PlanInput in;
  in.dims = cfg.dims;
  in.world = 64;
  in.ranks_per_node = 8;
  in.mesh_request = cfg.parallel.mesh_request;
  in.batch = cfg.batch;
  in.bf16 = true;
  in.memory_budget = 80.0 * 1073741824.0;
  const MeshSearch ms = rank_strategies(in, search_space(cfg).strategies, h100ish());
  ASSERT_GE(ms.chosen, 0) << ms.reason;
  const Candidate& w = ms.candidates[ms.chosen];
  for (const Candidate& c : ms.candidates) {
    if (!c.plan.fits) continue;
    EXPECT_GE(c.pred.step_seconds_overlap, w.pred.step_seconds_overlap) << parallel::strategy_name(c.plan.strategy);
    if (c.pred.step_seconds_overlap == w.pred.step_seconds_overlap)
      EXPECT_GE(c.plan.comm.total(), w.plan.comm.total()) << parallel::strategy_name(c.plan.strategy);
  }
  EXPECT_NE(ms.reason.find("fastest predicted step that fits"), std::string::npos) << ms.reason;
}

TEST(MeshSearch, GenerateIsRankedByATokensForwardAndHoldsTheParametersWhereTheyFit) {
  // SmolLM2-135M's shape generating one sequence on 8 ranks of a node: a token's forward is
  // microseconds, every gather of the model costs it again. Where the whole model fits on
  // each rank, the pick is no_shard without tensor parallelism: no communication at all.
  model::ModelSettings m;
  m.family = ModelFamily::Llama;
  m.vocab_size = 49152;
  m.d_model = 576;
  m.n_layers = 30;
  m.n_heads = 9;
  m.n_kv_heads = 3;
  m.ffn_dim = 1536;
  m.max_seq_len = 2048;
  RunSpec cfg;
  cfg.dims = model::resolve_dims(m);
  cfg.parallel.mesh_request = {-1, -1, -1};
  cfg.use = ModelUse::Generate;
  cfg.batch = BatchSpec{1, 1024, 1, 0};
  cfg.kv_cache_positions = 1024;
  cfg.train.precision = Precision::Bf16;
  plan::PlanInput in;
  in.dims = cfg.dims;
  in.world = 8;
  in.ranks_per_node = 8;
  in.mesh_request = cfg.parallel.mesh_request;
  in.batch = cfg.batch;
  in.bf16 = true;
  in.use = ModelUse::Generate;
  in.kv_cache_positions = 1024;
  in.memory_budget = 80.0 * 1073741824.0;
  const MeshSearch ms = search_meshes(in, search_space(cfg), h100ish());
  ASSERT_GE(ms.chosen, 0) << ms.reason;
  const Candidate& w = ms.candidates[ms.chosen];
  EXPECT_EQ(w.plan.strategy, parallel::Strategy::NoShard) << ms.reason;
  EXPECT_EQ(w.plan.mesh_shape.tp, 1) << ms.reason;
  EXPECT_EQ(w.plan.comm.total(), 0.0);
  EXPECT_NE(ms.reason.find("fastest predicted forward pass per generated token that fits"), std::string::npos)
      << ms.reason;
  // A sharded candidate pays the gathers of all 30 blocks for the token.
  for (const Candidate& c : ms.candidates)
    if (c.plan.strategy == parallel::Strategy::FullShard && c.plan.mesh_shape.dp_shard > 1)
      EXPECT_GT(c.pred.step_seconds_overlap, 2 * w.pred.step_seconds_overlap);
}
