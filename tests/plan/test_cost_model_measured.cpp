// The cost model's measurements on the job's own ranks (collective over the world, at 1, 2
// and 4 ranks; at 4 ranks on this 2-core machine the cores are oversubscribed, the case the
// measurements exist for): every rank gets the same value, in range, and the group sizes
// that cannot be measured report nothing rather than a made-up number.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/collectives.hpp"
#include "core/memory.hpp"
#include "plan/measure.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {

model::ModelDims tiny_gpt() { return test::gpt2_dims(264, 128, 2, 4, 32); }

// The same value on every rank (the measurements reduce over the world).
void expect_agreed(double v) {
  const MpiComm& world = test::world();
  EXPECT_EQ(all_reduce_value(world, v, ReduceOp::Min), all_reduce_value(world, v, ReduceOp::Max));
}

}  // namespace

TEST(CostModelMeasured, SyncCostIsAgreedFiniteAndOnlyForGroupsThatExist) {
  const Runtime& rt = test::runtime();
  const int n = rt.world().size();
  const auto d = tiny_gpt();
  // No group to synchronise, or groups that do not tile the world: nothing measured.
  EXPECT_EQ(measure_sync_cost(rt, Backend::Mpi, d, 64, 1, 1e10), 0.0);
  EXPECT_EQ(measure_sync_cost(rt, Backend::Mpi, d, 64, n + 1, 1e10), 0.0);
  for (int g = 2; g <= n; g *= 2) {
    const double s = measure_sync_cost(rt, Backend::Mpi, d, 64, g, 1e10);
    EXPECT_TRUE(std::isfinite(s)) << g;
    EXPECT_GE(s, 0.0) << g;
    EXPECT_LT(s, 0.5) << g;  // a wait per collective, not seconds
    expect_agreed(s);
  }
}

TEST(CostModelMeasured, OverlapIsAFractionAgreedByAllRanks) {
  const Runtime& rt = test::runtime();
  const double f = measure_overlap(rt, Backend::Mpi, tiny_gpt(), 64, 1, 1e10);
  if (rt.world().size() < 2) EXPECT_EQ(f, 1.0);  // nothing to overlap with
  EXPECT_GE(f, 0.0);
  EXPECT_LE(f, 1.0);
  expect_agreed(f);
}

TEST(CostModelMeasured, InputsCarryTheSyncCostOfEveryTpGroupOfANode) {
  const Runtime& rt = test::runtime();
  const auto d = tiny_gpt();
  BatchSpec batch;
  batch.micro_batch = 2;
  batch.seq_len = 32;
  MeasureRequest req;
  req.batch = batch;
  req.backend = Backend::Mpi;
  req.model = d;
  MemoryPool& pool = MemoryPool::instance();
  pool.trim();
  const MemoryStats before = pool.stats();
  const CostModelInputs c = measure_cost_inputs(req, rt);
  // Its operands (GEMMs of the model's shapes, copy buffers) are not left in the pool's
  // cache, where no step would take them and they would stay reserved through the run.
  EXPECT_EQ(pool.stats().reserved, before.reserved);
  EXPECT_EQ(pool.stats().total_in_use, before.total_in_use);
  EXPECT_GT(pool.stats().device_allocations, before.device_allocations) << "it measured with pool buffers";
  const int local = rt.topology().min_ranks_per_node;  // a tp group fits the smallest node
  if (local < 2) {
    EXPECT_TRUE(c.sync_s.empty());
    EXPECT_EQ(c.sync_seconds(2), 0.0);
    return;
  }
  ASSERT_EQ(static_cast<int>(c.sync_s.size()), local + 1);
  for (int g = 2; g <= local; g *= 2) {
    EXPECT_GE(c.sync_seconds(g), 0.0);
    expect_agreed(c.sync_seconds(g));
  }
  EXPECT_NE(c.sync_source.find("measured here"), std::string::npos) << c.sync_source;
}
