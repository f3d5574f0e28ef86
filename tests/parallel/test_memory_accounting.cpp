// The measured allocation counter (MemoryPool, by category) against the planner's
// prediction, full_shard vs no_shard persistent bytes, per-rank parameter bytes
// scaling as 1/(tp * dp_shard) for the sharded parts, and the communication buffers'
// peak against the reduction recipes' sizes.
#include <gtest/gtest.h>

#include <array>

#include "app/run_spec_resolve.hpp"
#include "config/config.hpp"
#include "formats/gguf_file.hpp"
#include "model/param_spec.hpp"
#include "parallel/reduction_plan.hpp"
#include "plan/run_setup.hpp"
#include "train/session.hpp"
#include "train/step.hpp"
#include "test_support.hpp"

using namespace meshtrain;

namespace {

Config model_config(const std::string& strategy, int tp, int dp_shard) {
  Config c = test::tiny_model_config("llama", 32, 512);
  c.model.d_model = 128;
  c.model.n_layers = 4;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 4;
  c.model.ffn_dim = 384;
  c.parallel.strategy = choice_of<StrategyChoice>(strategy);
  c.parallel.tp = tp;
  c.parallel.dp_shard = dp_shard;
  c.train.micro_batch = 1;
  c.train.seq_len = 16;
  c.data.dir = "random";
  c.parallel.memory_limit = "1GiB";
  return c;
}

/// The same model fine-tuned with LoRA adapters on every projection.
Config with_lora(Config c) {
  c.model.lora_rank = 8;
  c.model.lora_alpha = 16;
  c.model.lora_targets = "q,k,v,o,gate,up,down";
  return c;
}

struct Measured {
  double params = 0, grads = 0, optimizer = 0, persistent = 0, predicted_persistent = 0;
  double peak = 0;  ///< the pool's peak bytes in use during construction and one step, over the state before
  double comm_peak = 0;  ///< the peak of MemCategory::CommBuffers (the reductions' staging) over the same span
  std::vector<model::UnitLayout> layouts;  ///< the engine's units
  parallel::Strategy strategy = parallel::Strategy::FullShard;
  int grad_accum = 1;
  plan::MemoryEstimate predicted;
};

/// Builds the session, runs one optimizer step (so every persistent buffer exists), and
/// reads the counter: bytes in use per category, as a delta over the state before.
template <class T = float>
Measured measure(const Config& cfg) {
  MemoryPool::instance().reset_peaks();
  const auto before = MemoryPool::instance().stats().in_use;
  const double before_total = static_cast<double>(MemoryPool::instance().stats().total_in_use);
  const plan::RunSetup setup = app::resolve_run(cfg, test::runtime().topology());
  Measured m;
  {
    train::Session<T> s(test::runtime(), setup);
    s.engine().init_parameters(1);
    int updates = 0;
    const auto fill = [&](int, std::int32_t* in, std::int32_t* tgt) {
      for (int i = 0; i < cfg.train.micro_batch * cfg.train.seq_len; ++i) in[i] = tgt[i] = i % 97;
    };
    train::train_step(s, train::step_settings(setup), 0, updates, fill);
    const auto& now = MemoryPool::instance().stats().in_use;
    const auto delta = [&](MemCategory c) {
      return static_cast<double>(now[static_cast<int>(c)] - before[static_cast<int>(c)]);
    };
    m.params = delta(MemCategory::Params);
    m.grads = delta(MemCategory::Grads);
    m.optimizer = delta(MemCategory::Optimizer);
    m.persistent = m.params + m.grads + m.optimizer;
    m.peak = static_cast<double>(MemoryPool::instance().stats().peak_total_in_use) - before_total;
    const int comm = static_cast<int>(MemCategory::CommBuffers);
    m.comm_peak = static_cast<double>(MemoryPool::instance().stats().peak_in_use[comm] - before[comm]);
    m.layouts = s.engine().layouts();
    m.strategy = setup.strategy;
    m.grad_accum = setup.batch.grad_accum;
    // The planner's figure for the strategy and mesh this run uses.
    const plan::PlanInput in = plan::plan_input(setup.spec, plan::this_job(setup.spec, test::runtime().topology()));
    const plan::StrategyPlan p = plan::plan_strategy(in, setup.strategy, setup.mesh_shape);
    m.predicted_persistent = p.memory.persistent();
    m.predicted = p.memory;
  }
  return m;
}

/// A small-but-not-tiny Llama (about 13 M parameters: the weights, not the activations,
/// dominate as they do in real fine-tuning) with a short micro-batch.
Config mid_model(const std::string& precision) {
  Config c = model_config("full_shard", 1, -1);
  c.model.vocab_size = 8192;
  c.model.d_model = 384;
  c.model.n_layers = 4;
  c.model.n_heads = 6;
  c.model.n_kv_heads = 2;
  c.model.ffn_dim = 1152;
  c.model.max_seq_len = 64;
  c.train.seq_len = 64;
  c.train.precision = choice_of<Precision>(precision);
  return c;
}

/// The CommBuffers peak of one step as the reduction recipes size it: the engine launches
/// the reductions blocks first and the outer unit last (every micro-step, or the last one
/// only), and allocates each one's staging before completing the one launched before it.
double recipe_comm_peak(const Measured& m, DType compute, DType reduce) {
  const parallel::ReductionPlan rp = parallel::reduction_plan(parallel::traits(m.strategy), compute, reduce);
  const bool every_micro = parallel::traits(m.strategy).reduce_every_micro;
  double peak = 0, previous = 0;
  for (int micro = 0; micro < m.grad_accum; ++micro) {
    if (!every_micro && micro != m.grad_accum - 1) continue;
    for (int u = static_cast<int>(m.layouts.size()) - 1; u >= 0; --u) {
      const model::UnitLayout& L = m.layouts[u];
      if (L.trainable_padded() == 0) continue;
      const double b = static_cast<double>(rp.at(micro == 0).comm_buffer_bytes(L.trainable_padded(), L.shard_numel));
      peak = std::max(peak, previous + b);
      previous = b;
    }
  }
  return peak;
}

}  // namespace

TEST(MemoryAccounting, CommBufferPeakIsWhatTheReductionRecipesAskFor) {
  // The recipes' buffer sizes (parallel/reduction_plan.hpp) are the engine's allocations:
  // every strategy x compute dtype x reduce dtype, two micro-steps (the later recipes too).
  for (const char* strategy : {"no_shard", "full_shard", "shard_grad_op"})
    for (const char* precision : {"fp32", "bf16"})
      for (const ReduceDtype reduce : {ReduceDtype::Fp32, ReduceDtype::Bf16}) {
        Config c = model_config(strategy, 1, -1);
        c.train.precision = choice_of<Precision>(precision);
        c.train.grad_accum = 2;
        c.parallel.reduce_dtype = reduce;
        const bool bf16_compute = std::string(precision) == "bf16";
        const Measured m = bf16_compute ? measure<bf16>(c) : measure<float>(c);
        ASSERT_EQ(m.grad_accum, 2);
        const DType wire = reduce == ReduceDtype::Bf16 ? DType::BF16 : DType::F32;
        const double expect = recipe_comm_peak(m, bf16_compute ? DType::BF16 : DType::F32, wire);
        std::printf("%s %s, reduce %s: comm buffer peak %.0f bytes, recipes %.0f, planner's model %.0f\n", strategy,
                    precision, dtype_name(wire), m.comm_peak, expect, m.predicted.comm_buffers);
        EXPECT_EQ(m.comm_peak, expect) << strategy << " " << precision << " reduce " << dtype_name(wire);
        // The planner walks the same recipes: its comm-buffer figure is the allocation.
        EXPECT_EQ(m.predicted.comm_buffers, m.comm_peak) << strategy << " " << precision << " reduce " << dtype_name(wire);
      }
}

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
  const model::ModelDims dims = app::resolve_model(base.model);
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

TEST(MemoryAccounting, LoraPersistentBytesMatchThePlan) {
  // Under LoRA the planner's params are the adapters' fp32 masters plus the frozen base in
  // the compute dtype; grads and moments cover the adapters only. Exact, as without LoRA.
  for (const char* strategy : {"no_shard", "full_shard", "shard_grad_op"}) {
    const Config full = model_config(strategy, 1, -1);
    const Measured m = measure(with_lora(full));
    EXPECT_EQ(m.persistent, m.predicted_persistent) << strategy;
    EXPECT_EQ(m.params, m.predicted.params) << strategy;
    EXPECT_EQ(m.grads, m.predicted.grads) << strategy;
    EXPECT_EQ(m.optimizer, m.predicted.optimizer) << strategy;
    // The adapters' optimizer state: 8 bytes per adapter element held by this rank (padding
    // aside), nothing for the base.
    const model::ModelDims dims = app::resolve_model(with_lora(full).model);
    double adapters = 0;
    for (const auto& p : model::build_param_specs(dims, 1))
      if (p.is_lora) adapters += static_cast<double>(p.numel());
    const double held = std::string(strategy) == "no_shard" ? adapters : adapters / test::world().size();
    EXPECT_GE(m.optimizer, 8.0 * held) << strategy;
    EXPECT_LE(m.optimizer, 8.0 * held * 1.25 + 8.0 * 64 * 2 * (dims.n_layers + 1)) << strategy;
    const Measured f = measure(full);
    std::printf("%s: optimizer state LoRA %.0f bytes vs full %.0f, grads %.0f vs %.0f, planned frozen base %.0f\n",
                strategy, m.optimizer, f.optimizer, m.grads, f.grads, m.predicted.frozen);
    // Rank-8 adapters on every projection are 8.5% of this small model's weights.
    EXPECT_LT(m.optimizer, 0.10 * f.optimizer) << strategy;
    // fp32: the frozen base keeps 4 of the 16 bytes per weight (no grads, no moments).
    EXPECT_LT(m.persistent, 0.35 * f.persistent) << strategy;
  }
}

TEST(MemoryAccounting, LoraPeakIsAtMostFortyPercentOfFullTraining) {
  // Issue 18: a LoRA run's per-rank peak (the pool's accounting: every device buffer, by
  // construction deterministic) is at most 40% of the same run training every weight, in
  // bf16 (the fine-tuning precision, where the base keeps 2 bytes per weight instead of 16).
  // In fp32 the base keeps 4 bytes and the gathered fp32 units weigh more, so the ratio is
  // higher and grows with the shard group (0.35 / 0.41 / 0.49 at 1 / 2 / 4 ranks on a
  // 25 M-parameter model): the persistent check of the test above covers fp32.
  const Config full = mid_model("bf16");
  const Measured f = measure<bf16>(full);
  const Measured l = measure<bf16>(with_lora(full));
  std::printf("bf16, %d ranks: peak bytes per rank LoRA %.0f, full %.0f (ratio %.3f); persistent %.0f vs %.0f\n",
              test::world().size(), l.peak, f.peak, l.peak / f.peak, l.persistent, f.persistent);
  EXPECT_LE(l.peak, 0.40 * f.peak);
}

namespace {

/// One optimizer step of a QLoRA run (model.base_quant) as the trainer measures it: the
/// pool's peak over the step alone (summary.json's peak_by_category.total_in_use resets
/// the peaks after the initialisation; so does this), the frozen all-gather bytes the
/// engine counted (metrics.jsonl's frozen_gather_bytes), and the planner's figures.
struct QloraStep {
  double peak = 0, gathered_bytes = 0, params = 0;
  std::array<double, kNumMemCategories> category_peak{};  ///< each category's own peak over the step
  plan::MemoryEstimate predicted;
  plan::CommVolume comm;
};

/// model.base_quant=gguf without a file: cfg resolved (with base_quant=nf4), then its base
/// kept as a GGUF file's blocks -- Q8_0 embeddings, Q4_1 matrices -- whose bytes are left
/// zero (init_parameters sets values, which a gguf unit never takes): the memory is the
/// same whatever the blocks hold.
plan::RunSetup gguf_setup(const Config& cfg) {
  plan::RunSetup setup = app::resolve_run(cfg, test::runtime().topology());
  model::ModelDims& d = setup.spec.dims;
  d.base_quant = BaseQuant::Gguf;
  for (const model::ParamSpec& p : model::build_param_specs(d, 1))
    if (p.frozen && p.shape.size() == 2)
      d.base_formats[p.name] = {static_cast<std::uint32_t>(p.is_embedding ? formats::GgmlType::Q8_0
                                                                           : formats::GgmlType::Q4_1),
                                p.shape[0]};
  return setup;
}

QloraStep qlora_step(const Config& cfg, bool gguf = false) {
  QloraStep q;
  const plan::RunSetup setup = gguf ? gguf_setup(cfg) : app::resolve_run(cfg, test::runtime().topology());
  const auto in_use = [](MemCategory c) {
    return static_cast<double>(MemoryPool::instance().stats().in_use[static_cast<int>(c)]);
  };
  const double params_before = in_use(MemCategory::Params);
  const double total_before = static_cast<double>(MemoryPool::instance().stats().total_in_use);
  {
    train::Session<bf16> s(test::runtime(), setup);
    if (!gguf) s.engine().init_parameters(1);
    q.params = in_use(MemCategory::Params) - params_before;
    MemoryPool::instance().reset_peaks();
    const std::uint64_t gathered0 = s.engine().frozen_gather_bytes();
    int updates = 0;
    const auto fill = [&](int, std::int32_t* in, std::int32_t* tgt) {
      for (int i = 0; i < cfg.train.micro_batch * cfg.train.seq_len; ++i) in[i] = tgt[i] = i % 97;
    };
    train::train_step(s, train::step_settings(setup), 0, updates, fill);
    // The step's peak over what was in use before the session: its persistent state and
    // everything the step allocates.
    q.peak = static_cast<double>(MemoryPool::instance().stats().peak_total_in_use) - total_before;
    for (int c = 0; c < kNumMemCategories; ++c)
      q.category_peak[static_cast<std::size_t>(c)] =
          static_cast<double>(MemoryPool::instance().stats().peak_in_use[static_cast<std::size_t>(c)]);
    q.gathered_bytes = static_cast<double>(s.engine().frozen_gather_bytes() - gathered0);
    const plan::PlanInput in = plan::plan_input(setup.spec, plan::this_job(setup.spec, test::runtime().topology()));
    const plan::StrategyPlan p = plan::plan_strategy(in, setup.strategy, setup.mesh_shape);
    q.predicted = p.memory;
    q.comm = p.comm;
  }
  return q;
}

}  // namespace

TEST(MemoryAccounting, QloraPlanPredictsThePeakAndTheFrozenGather) {
  // Issue 32, must-show 2 in small: with the frozen base kept in NF4, int8 or a GGUF
  // file's blocks (and in bf16 for comparison), full_shard bf16 LoRA, the planner's persistent parameters and frozen
  // all-gather bytes per step are the engine's exactly, and its per-rank total is within
  // 5% of the pool's measured peak of a step. The 1B-parameter figures are
  // perf/bench_qlora_memory.sh's.
  const int n = test::world().size();
  double peak_none = 0, gather_none = 0;
  struct Base {
    BaseQuant quant;
    bool embeddings;  ///< model.base_quant_embeddings
  };
  for (const Base base : {Base{BaseQuant::None, true}, Base{BaseQuant::Nf4, true}, Base{BaseQuant::Int8, true},
                          Base{BaseQuant::Nf4, false}, Base{BaseQuant::Gguf, true}, Base{BaseQuant::Gguf, false}}) {
    const BaseQuant quant = base.quant;
    Config c = with_lora(mid_model("bf16"));
    // 16 tokens a rank: the weights dominate the peak, as in fine-tuning a large model
    // (the 1B-parameter run's activations are 0.4% of its peak). At 64 tokens the
    // planner's activation term, which overstates this small model's by half, alone puts
    // the total 6-11% above the measured peak.
    c.train.seq_len = 16;
    c.model.base_quant = quant == BaseQuant::Gguf ? BaseQuant::Nf4 : quant;  // gguf: gguf_setup
    c.model.base_quant_embeddings = base.embeddings;
    const QloraStep q = qlora_step(c, quant == BaseQuant::Gguf);
    std::printf("%d rank(s), base %s%s: peak %.0f bytes per rank, planned %.0f (%+.2f%%); params %.0f, planned %.0f; "
                "frozen all-gather %.0f bytes per step, planned %.0f\n",
                n, choice_name(quant), base.embeddings ? "" : " (embeddings and head in bf16)", q.peak,
                q.predicted.total(), 100.0 * (q.predicted.total() / q.peak - 1.0), q.params, q.predicted.params,
                q.gathered_bytes, q.comm.frozen_gather);
    std::printf("  category peaks:");
    for (int k = 0; k < kNumMemCategories; ++k)
      std::printf(" %s %.0f", category_name(static_cast<MemCategory>(k)), q.category_peak[static_cast<std::size_t>(k)]);
    const plan::MemoryEstimate& e = q.predicted;
    std::printf("\n  planned: params %.0f grads %.0f optimizer %.0f gathered %.0f grad_buffers %.0f activations %.0f "
                "comm_buffers %.0f\n", e.params, e.grads, e.optimizer, e.gathered, e.grad_buffers, e.activations,
                e.comm_buffers);
    EXPECT_EQ(q.params, q.predicted.params) << choice_name(quant);
    EXPECT_EQ(q.gathered_bytes, q.comm.frozen_gather) << choice_name(quant);
    EXPECT_NEAR(q.predicted.total(), q.peak, 0.05 * q.peak) << choice_name(quant);
    if (quant == BaseQuant::None) {
      peak_none = q.peak;
      gather_none = q.gathered_bytes;
      continue;
    }
    std::printf("  %s / bf16 base: peak %.3f, frozen all-gather %.3f\n", choice_name(quant), q.peak / peak_none,
                n > 1 ? q.gathered_bytes / gather_none : 0.0);
    // Quantized, what travels shrinks by the bits per weight, and the peak shrinks: the
    // outer unit (here 37% of the weights: an 8192 x 384 embedding) stays quantized while
    // gathered (measured nf4 0.51-0.64, int8 0.74-0.86 of the bf16 base's peak at 1-4 ranks;
    // when it was dequantized whole, int8 at 4 ranks peaked at 1.047 x the bf16 base's).
    if (base.embeddings) EXPECT_LT(q.peak, peak_none) << choice_name(quant);
    // With the embeddings and head in bf16 (37% of the weights here) about half the bytes
    // travel. gguf: Q4_1 is 5 bits a weight, the Q8_0 embedding 8.5 (about 0.39 of bf16's).
    const double gather_bound = !base.embeddings ? 0.60 : quant == BaseQuant::Nf4 ? 0.30 : 0.55;
    if (n > 1) EXPECT_LT(q.gathered_bytes, gather_bound * gather_none) << choice_name(quant);
    else EXPECT_EQ(q.gathered_bytes, 0.0);
  }
}
