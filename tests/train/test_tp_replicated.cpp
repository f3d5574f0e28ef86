// Tensor-parallel-replicated parameters (norm weights, row-parallel biases, positions,
// replicated GQA key/value projections) must stay identical on every tp rank. meshtrain
// keeps them so by computing their gradients identically (from the all-reduced activation
// gradients) — except replicated kv projections, whose partial gradients are summed over
// tp — so the AdamW updates are identical too. This test trains a few steps and compares
// them bitwise across the tp group.
#include <gtest/gtest.h>

#include <cstring>

#include "app/run_spec_resolve.hpp"
#include "config/config.hpp"
#include "train/session.hpp"
#include "train/step.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

void check_family(const char* family, int n_kv) {
  const int n = test::world().size();
  Config c = test::tiny_model_config(family, 16);
  c.model.n_kv_heads = n_kv;
  c.model.ffn_dim = 128;
  c.parallel.strategy = StrategyChoice::FullShard;
  c.parallel.tp = n >= 4 ? 2 : n;  // 4 ranks: dp_shard 2 x tp 2
  c.train.micro_batch = 2;
  c.train.steps = 3;
  c.data.dir = "random";
  const plan::RunSetup setup = app::resolve_run(c, test::runtime().topology());
  train::Session<float> s(test::runtime(), setup);
  s.engine().init_parameters(11);
  int updates = 0;
  const int dp = setup.mesh_shape.dp(), d = s.mesh().dp_rank();
  for (int step = 0; step < 3; ++step) {
    const auto fill = [&](int micro, std::int32_t* in, std::int32_t* tgt) {
      for (int i = 0; i < c.train.micro_batch * c.train.seq_len; ++i) {
        const int v = (step * 131 + micro * 17 + d * 7 + i * 13 + dp) % 256;
        in[i] = v;
        tgt[i] = (v * 5 + 3) % 256;
      }
    };
    train::train_step(s, train::step_settings(setup), step, updates, fill);
  }
  const MPI_Comm tp = s.mesh().tp().mpi().get();
  int compared = 0;
  for (int u = 0; u < s.engine().num_units(); ++u) {
    const auto& st = s.engine().state(u);
    const std::vector<float> host = test::to_host(st.master);
    for (const auto& slot : s.engine().layouts()[u].slots) {
      const auto& p = s.engine().specs()[slot.spec];
      if (p.split_dim >= 0) continue;
      const std::int64_t a = std::max(st.begin, slot.offset), b = std::min(st.begin + st.numel, slot.offset + slot.numel);
      if (a >= b) continue;
      // Bitwise: compare the raw bits' min and max over the tp group.
      std::vector<std::int32_t> bits(b - a), lo(b - a), hi(b - a);
      std::memcpy(bits.data(), host.data() + (a - st.begin), bits.size() * 4);
      MPI_Allreduce(bits.data(), lo.data(), static_cast<int>(bits.size()), MPI_INT32_T, MPI_MIN, tp);
      MPI_Allreduce(bits.data(), hi.data(), static_cast<int>(bits.size()), MPI_INT32_T, MPI_MAX, tp);
      EXPECT_EQ(lo, hi) << p.name << " differs across tensor-parallel ranks";
      ++compared;
    }
  }
  // Some shards hold no replicated parameter; over the job something must be compared.
  int total = 0;
  MPI_Allreduce(&compared, &total, 1, MPI_INT, MPI_SUM, test::world().get());
  EXPECT_GT(total, 0);
}

}  // namespace

TEST(TpReplicated, Gpt2NormsBiasesPositionsStayIdentical) { check_family("gpt2", -1); }
TEST(TpReplicated, LlamaNormsAndReplicatedKvStayIdentical) { check_family("llama", 1); }  // 1 kv head: replicated
