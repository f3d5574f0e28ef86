// Generation with the KV cache (prefill once, then one position per token against the
// cached keys/values) against recomputing the whole context per token, on tiny GPT-2 and
// Llama (GQA) models, on this job's mesh: 1 rank; 2 ranks as tp=2 and as dp_shard=2; 4
// ranks as dp_shard=2 x tp=2. Per step the cached logits equal the recomputed ones up to
// the rounding of a different summation order, and greedy decoding gives the same tokens,
// also when the context outgrows model.max_seq_len (where the cache stops being used).
// The forward-only session of eval/generate gives the training session's loss and logits
// bit for bit while holding no gradients or moments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "app/run_spec_resolve.hpp"
#include "config/config.hpp"
#include "parallel/micro_step.hpp"
#include "train/generate.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

struct MeshCase {
  int tp;
  const char* name;
};

/// The meshes this rank count can run: every split of the ranks into dp_shard x tp.
std::vector<MeshCase> meshes() {
  const int n = test::world().size();
  if (n == 1) return {{1, "1 rank"}};
  if (n == 2) return {{2, "tp=2"}, {1, "dp_shard=2"}};
  return {{2, "dp_shard=2 x tp=2"}};
}

Config tiny(const char* family, int n_kv, int tp, int max_seq_len) {
  Config c = test::tiny_model_config(family, max_seq_len);
  c.model.n_kv_heads = n_kv;
  c.model.ffn_dim = 128;
  // Larger than the training default so the untrained model's logits are far from uniform
  // and greedy decoding wanders over many tokens instead of repeating one.
  c.model.init_std = 0.3;
  c.parallel.strategy = StrategyChoice::FullShard;
  c.parallel.tp = tp;
  c.train.micro_batch = 1;
  c.data.dir = "random";
  return c;
}

std::vector<std::int32_t> prompt_ids(int n) {
  std::vector<std::int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = (i * 37 + 11) % 256;
  return ids;
}

Buffer<std::int32_t> device_ids(const std::vector<std::int32_t>& ids, std::size_t from, std::size_t n) {
  Buffer<std::int32_t> dev(n, MemCategory::Workspace);
  Kokkos::deep_copy(dev.view(), UView<const std::int32_t, HostMem>(ids.data() + from, n));
  return dev;
}

/// Feeds a fixed token sequence: prefill of `prefill` tokens, then one at a time; every
/// step's logits (cached) against a full recomputation of the same prefix.
void check_logits(train::Session<float>& s, const std::string& what) {
  const std::vector<std::int32_t> ids = prompt_ids(24);
  const int prefill = 9;
  model::KvCache<float> kv(s.setup().spec.dims, s.tp(), 1, static_cast<int>(ids.size()));
  double worst = 0, scale = 0;
  for (int len = prefill; len <= static_cast<int>(ids.size()); ++len) {
    const int fresh = len - kv.filled;
    Buffer<std::int32_t> part = device_ids(ids, kv.filled, fresh);
    const std::vector<float> cached = parallel::forward_logits_cached(s.engine(), s.model(), s.context(), part.data(),
                                                                      model::BatchShape{1, fresh}, kv);
    Buffer<std::int32_t> all = device_ids(ids, 0, len);
    const std::vector<float> full =
        parallel::forward_logits(s.engine(), s.model(), s.context(), all.data(), model::BatchShape{1, len}, true);
    ASSERT_EQ(cached.size(), full.size());
    ASSERT_EQ(kv.filled, len);
    double spread = 0;
    for (std::size_t v = 0; v < full.size(); ++v) {
      worst = std::max(worst, static_cast<double>(std::fabs(cached[v] - full[v])));
      spread = std::max(spread, static_cast<double>(std::fabs(full[v] - full[0])));
      scale = std::max(scale, static_cast<double>(std::fabs(full[v])));
    }
    ASSERT_GT(spread, 1e-2) << what << ": logits nearly constant, the comparison would prove little";
  }
  // fp32 with another summation order (attention over the cache in other GEMM shapes),
  // amplified through the layers: measured ~2e-6 of the largest logit; a wrong position,
  // head or mask moves logits by O(1).
  EXPECT_LT(worst, 1e-5 * scale) << what << ": cached logits differ from the recomputed ones by " << worst
                                 << " (largest logit " << scale << ")";
  if (test::world().rank() == 0) std::printf("  %s: max |cached - recomputed| logit %.2e, largest %.2f\n", what.c_str(), worst, scale);
}

void check_family(const char* family, int n_kv) {
  for (const MeshCase& m : meshes()) {
    // max_seq_len 40: a 12-token prompt and 40 new tokens outgrow the window at token 29.
    const Config c = tiny(family, n_kv, m.tp, 40);
    const plan::RunSetup setup = app::resolve_run(c, test::runtime().topology());
    train::Session<float> s(test::runtime(), setup);
    s.engine().init_parameters(5);
    const std::string what = std::string(family) + " on " + m.name;
    check_logits(s, what);

    train::SamplingOptions o;
    o.sampling.temperature = 0;  // greedy
    o.max_new_tokens = 40;
    o.kv_cache = true;
    train::GenerateStats with_stats;
    const std::vector<std::int32_t> with = train::generate_ids(s, prompt_ids(12), o, &with_stats);
    o.kv_cache = false;
    const std::vector<std::int32_t> without = train::generate_ids(s, prompt_ids(12), o);
    EXPECT_EQ(with, without) << what << ": greedy tokens differ with and without the KV cache";
    EXPECT_EQ(with.size(), 40u);
    EXPECT_EQ(with_stats.new_tokens, 40);
    EXPECT_EQ(with_stats.prompt_tokens, 12);
    // The continuation is not degenerate (else equality would prove little).
    std::vector<std::int32_t> distinct = with;
    std::sort(distinct.begin(), distinct.end());
    EXPECT_GE(std::unique(distinct.begin(), distinct.end()) - distinct.begin(), 5) << what;
    // Identical on every rank (rank 0's choice is broadcast, the caches must agree anyway).
    std::vector<std::int32_t> root = with;
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_INT32_T, 0, test::world().get());
    EXPECT_EQ(root, with) << what;
  }
}

}  // namespace

/// The loss and logits of one 16-token window: a training session's and an inference
/// session's of the same weights are the same bit for bit.
template <class T>
void expect_same_forward(train::Session<T>& trained, train::Session<T>& inference, const std::string& what) {
  const std::vector<std::int32_t> ids = prompt_ids(17);
  Buffer<std::int32_t> in = device_ids(ids, 0, 16), tgt = device_ids(ids, 1, 16);
  const model::BatchShape shape{1, 16};
  const double a = parallel::forward_loss(trained.engine(), trained.model(), trained.context(), in.data(), tgt.data(),
                                          shape);
  const double b = parallel::forward_loss(inference.engine(), inference.model(), inference.context(), in.data(),
                                          tgt.data(), shape);
  EXPECT_EQ(a, b) << what;
  EXPECT_TRUE(std::isfinite(a) && a > 0) << what;
  EXPECT_EQ(parallel::forward_logits(trained.engine(), trained.model(), trained.context(), in.data(), shape, false),
            parallel::forward_logits(inference.engine(), inference.model(), inference.context(), in.data(), shape,
                                     false))
      << what;
}

TEST(GenerateKvCache, Gpt2SameGreedyTokens) { check_family("gpt2", -1); }
TEST(GenerateKvCache, LlamaGqaSameGreedyTokens) { check_family("llama", 2); }  // 2 kv heads: split over tp=2
TEST(GenerateKvCache, LlamaReplicatedKvSameGreedyTokens) { check_family("llama", 1); }  // 1 kv head: replicated over tp

// A stop sequence (a chat template's end-of-turn marker) ends generation where the output
// first ends with it, and is dropped from the output; with and without the cache alike.
TEST(GenerateKvCache, StopSequenceEndsAndIsDropped) {
  const Config c = tiny("llama", 2, meshes()[0].tp, 64);
  const plan::RunSetup setup = app::resolve_run(c, test::runtime().topology());
  train::Session<float> s(test::runtime(), setup);
  s.engine().init_parameters(5);
  train::SamplingOptions o;
  o.sampling.temperature = 0;
  o.max_new_tokens = 30;
  const std::vector<std::int32_t> free_run = train::generate_ids(s, prompt_ids(8), o);
  ASSERT_EQ(free_run.size(), 30u);
  // Stop at the two tokens drawn 6th and 7th: the output is what came before their first
  // occurrence as a pair.
  o.stop_sequence = {free_run[5], free_run[6]};
  std::size_t end = 0;
  while (!(free_run[end] == free_run[5] && free_run[end + 1] == free_run[6])) ++end;
  const std::vector<std::int32_t> expected(free_run.begin(), free_run.begin() + end);
  for (const bool cached : {true, false}) {
    o.kv_cache = cached;
    train::GenerateStats st;
    EXPECT_EQ(train::generate_ids(s, prompt_ids(8), o, &st), expected) << "kv_cache=" << cached;
    EXPECT_EQ(st.steps, static_cast<int>(end) + 2);
  }
}

// The inference session of eval/generate (a forward-only engine) holds the weights only —
// no gradients, no AdamW moments — and computes the same loss and logits as a training
// session with the same weights, bit for bit, on this job's mesh.
TEST(GenerateKvCache, ForwardOnlySessionSameResultsWithoutTrainingState) {
  for (const MeshCase& m : meshes()) {
    const Config c = tiny("llama", 2, m.tp, 16);
    const plan::RunSetup setup = app::resolve_run(c, test::runtime().topology());
    train::Session<float> trained(test::runtime(), setup);
    train::Session<float> inference(test::runtime(), setup, train::SessionUse::Inference);
    trained.engine().init_parameters(5);
    inference.engine().init_parameters(5);
    std::size_t master_bytes = 0;
    for (int u = 0; u < inference.engine().num_units(); ++u) {
      const parallel::UnitState& st = inference.engine().state(u);
      EXPECT_GT(st.master.size(), 0u) << m.name << " unit " << u;
      EXPECT_TRUE(st.grad.empty() && st.exp_avg.empty() && st.exp_avg_sq.empty()) << m.name << " unit " << u;
      master_bytes += st.master.bytes();
    }
    EXPECT_EQ(inference.engine().persistent_bytes(), master_bytes) << m.name;
    EXPECT_EQ(trained.engine().persistent_bytes(), 4 * master_bytes) << m.name;

    expect_same_forward(trained, inference, m.name);
  }
}

// In bf16 the inference session is compute-only (FsdpEngine::compute_only): it keeps the
// trainable values in bf16 alone -- no fp32 master beside them, half of fp32's parameter
// bytes -- and the forward reads what a training session's gather casts from its master, so
// loss and logits are the same bit for bit, sharded (full_shard) and not (no_shard).
TEST(GenerateKvCache, Bf16ForwardOnlySessionHoldsNoFp32Master) {
  for (const MeshCase& m : meshes()) {
    for (const StrategyChoice strategy : {StrategyChoice::FullShard, StrategyChoice::NoShard}) {
      Config c = tiny("llama", 2, m.tp, 16);
      c.train.precision = Precision::Bf16;
      c.parallel.strategy = strategy;
      const std::string what = std::string(m.name) + (strategy == StrategyChoice::NoShard ? " no_shard" : " full_shard");
      const plan::RunSetup setup = app::resolve_run(c, test::runtime().topology());
      train::Session<bf16> trained(test::runtime(), setup);
      train::Session<bf16> inference(test::runtime(), setup, train::SessionUse::Inference);
      trained.engine().init_parameters(5);
      inference.engine().init_parameters(5);
      ASSERT_TRUE(inference.engine().compute_only()) << what;
      std::size_t master_bytes = 0;
      for (int u = 0; u < inference.engine().num_units(); ++u) {
        EXPECT_TRUE(inference.engine().state(u).master.empty()) << what << " unit " << u;
        master_bytes += trained.engine().state(u).master.bytes();
      }
      ASSERT_GT(master_bytes, 0u) << what;
      // Sharded: the bf16 shard held (half the master); no_shard: the persistent compute copy
      // (not persistent state) holds everything.
      EXPECT_EQ(inference.engine().persistent_bytes(), strategy == StrategyChoice::NoShard ? 0 : master_bytes / 2)
          << what;

      expect_same_forward(trained, inference, what);
    }
  }
}
