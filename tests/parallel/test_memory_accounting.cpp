// The measured allocation counter (MemoryPool, by category) against the planner's
// prediction, full_shard vs no_shard persistent bytes, and per-rank parameter bytes
// scaling as 1/(tp * dp_shard) for the sharded parts.
#include <gtest/gtest.h>

#include "meshtrain/config/config.hpp"
#include "meshtrain/train/run_setup.hpp"
#include "meshtrain/train/session.hpp"
#include "meshtrain/train/step.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

Config model_config(const std::string& strategy, int tp, int dp_shard) {
  Config c;
  c.model.family = "llama";
  c.model.vocab_size = 512;
  c.model.d_model = 128;
  c.model.n_layers = 4;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 4;
  c.model.ffn_dim = 384;
  c.model.max_seq_len = 32;
  c.model.tie_embeddings = false;
  c.parallel.strategy = strategy;
  c.parallel.tp = tp;
  c.parallel.dp_shard = dp_shard;
  c.train.micro_batch = 1;
  c.train.seq_len = 16;
  c.data.dir = "random";
  c.parallel.memory_limit = "1GiB";
  return c;
}

struct Measured {
  double params = 0, persistent = 0, predicted_persistent = 0;
};

/// Builds the session, runs one optimizer step (so every persistent buffer exists), and
/// reads the counter: bytes in use per category, as a delta over the state before.
Measured measure(const Config& cfg) {
  const auto before = MemoryPool::instance().stats().in_use;
  const train::RunSetup setup = train::resolve_run(cfg, test::runtime().topology());
  Measured m;
  {
    train::Session<float> s(test::runtime(), setup);
    s.engine().init_parameters(1);
    int updates = 0;
    const auto fill = [&](int, std::int32_t* in, std::int32_t* tgt) {
      for (int i = 0; i < cfg.train.micro_batch * cfg.train.seq_len; ++i) in[i] = tgt[i] = i % 97;
    };
    train::train_step(s, train::step_settings(cfg.train), 0, updates, fill);
    const auto& now = MemoryPool::instance().stats().in_use;
    const auto delta = [&](MemCategory c) {
      return static_cast<double>(now[static_cast<int>(c)] - before[static_cast<int>(c)]);
    };
    m.params = delta(MemCategory::Params);
    m.persistent = delta(MemCategory::Params) + delta(MemCategory::Grads) + delta(MemCategory::Optimizer);
    for (const auto& p : setup.plan.options)
      if (p.strategy == setup.strategy) m.predicted_persistent = p.memory.persistent();
  }
  return m;
}

}  // namespace

TEST(MemoryAccounting, MeasuredPersistentBytesMatchThePlan) {
  for (const char* strategy : {"no_shard", "full_shard", "shard_grad_op"}) {
    const Measured m = measure(model_config(strategy, 1, -1));
    // The planner builds the same layouts the engine allocates: within 10% (issue 4), in
    // fact exact, because nothing else persists between steps.
    EXPECT_NEAR(m.persistent, m.predicted_persistent, 0.10 * m.predicted_persistent) << strategy;
    EXPECT_EQ(m.persistent, m.predicted_persistent) << strategy;
  }
}

TEST(MemoryAccounting, FullShardPersistentBytesAreAQuarterOfNoShardAtFourRanks) {
  const int n = test::world().size();
  const Measured full = measure(model_config("full_shard", 1, -1));
  const Measured none = measure(model_config("no_shard", 1, -1));
  std::printf("ranks %d: persistent bytes full_shard %.0f, no_shard %.0f (ratio %.3f)\n", n, full.persistent,
              none.persistent, full.persistent / none.persistent);
  // Sharding divides params + grads + moments by the shard group; padding to the shard
  // alignment adds a little. Issue 4 asks for <= 30% at 4 ranks.
  EXPECT_LE(full.persistent, (1.0 / n) * none.persistent * 1.05);
  if (n == 4) EXPECT_LE(full.persistent, 0.30 * none.persistent);
}

TEST(MemoryAccounting, ParameterBytesScaleWithTpTimesDpShard) {
  const int n = test::world().size();
  const Config base = model_config("full_shard", 1, 1);
  const model::ModelDims dims = model::resolve_dims(base.model);
  for (int tp = 1; tp <= n; tp *= 2) {
    const int dp_shard = n / tp;
    const Measured m = measure(model_config("full_shard", tp, dp_shard));
    // Expected: split parameters / (tp * dp_shard), tp-replicated ones (norms, replicated
    // kv) / dp_shard only; fp32 master.
    double expect = 0;
    for (const auto& p : model::build_param_specs(dims, tp))
      expect += 4.0 * p.numel() / (p.split_dim >= 0 ? tp * dp_shard : dp_shard);
    std::printf("tp %d x dp_shard %d: params %.0f bytes per rank, expected %.0f\n", tp, dp_shard, m.params, expect);
    // Alignment padding of every parameter offset and shard boundary: a few percent here.
    EXPECT_NEAR(m.params, expect, 0.05 * expect) << "tp=" << tp << " dp_shard=" << dp_shard;
  }
}
