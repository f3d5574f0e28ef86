// The cost model's pure predictor (plan/cost_model.hpp) and the memory model
// (plan/planner.hpp) on a fixed table of machine measurements: nothing is measured, every
// expected value is derived by hand in the comments from the formulas' definitions.
#include <gtest/gtest.h>

#include "plan/cost_model.hpp"
#include "plan/planner.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {

// A tiny GPT-2: vocabulary 256, d_model C = 64, 2 layers, 2 heads (head_dim 32, kv heads 2),
// ffn 4C = 256, max_seq_len 64, tied embeddings. Every tensor is a multiple of the flat
// layout's 64-element alignment, so the units hold exactly the parameters:
//   block: ln1 2C + qkv C x 3C + 3C + proj C x C + C + ln2 2C + fc C x 4C + 4C + proj 4C x C + C
//        = 12 C^2 + 13 C = 49152 + 832 = 49984
//   outer: wte 256 x 64 + wpe 64 x 64 + ln_f 2C = 16384 + 4096 + 128 = 20608
//   total: 20608 + 2 x 49984 = 120576
model::ModelDims tiny() { return test::gpt2_dims(256, 64, 2, 2, 64); }

/// The measurement table: a 1 TFLOP/s GEMM, 100 GB/s copies and links, 10 us per ring step,
/// NCCL rings, everything hidden that the schedule allows.
CostModelInputs table() {
  CostModelInputs c;
  c.gemm_flops = 1e12;
  c.model_gemm_flops = 0;  // not measured: the square rate
  c.copy_bytes = 1e11;
  c.adamw_s_per_elem = 0;  // not measured: AdamW counts as 28 bytes per element
  c.activation_s_per_elem = 0;
  c.intra_bus_bytes = 1e11;
  c.inter_bus_bytes = 1e10;
  c.latency_s = 1e-5;
  c.mpi_collectives = false;
  c.overlap = 1.0;
  return c;
}

PlanInput job(int world) {
  PlanInput in;
  in.dims = tiny();
  in.world = world;
  in.ranks_per_node = world;
  in.batch = {2, 32, 1, 0};  // micro_batch 2 x seq_len 32, one micro-step
  in.prefetch = 1;
  return in;
}

/// A candidate with round figures in place of the memory model's: 1000 fp32 state elements
/// on this rank, 1 MB of activation traffic per micro-step, no communication.
StrategyPlan round_plan(parallel::Strategy s, const MeshShape& shape, int dp) {
  StrategyPlan p;
  p.strategy = s;
  p.mesh_shape = shape;
  p.batch = job(dp).batch.resolved(dp);
  p.memory.params = 4.0 * 1000;
  p.activation_traffic = 1e6;
  return p;
}

// Shared by both step tests (one micro-step of 64 tokens per rank):
//   flops_per_token_forward(32) = 2 x (L (attn + mlp) + head) + 4 L seq C
//     attn = C^2 + 2 C x 64 + C^2 = 16384, mlp = 2 C x 4C = 32768, head = 256 C = 16384
//     = 2 x (2 x 49152 + 16384) + 4 x 2 x 32 x 64 = 229376 + 16384 = 245760 FLOP
//   gemm_s = (3 x 245760 + 2 L seq C = 8192) x 64 / 1e12 = 745472 x 64 / 1e12 = 4.7710208e-5
//   optimizer_s = 28 B x 1000 / 1e11 = 2.8e-7
//   elementwise_s = optimizer + 6 passes x 1e6 B / 2 / 1e11 = 2.8e-7 + 3e-5 = 3.028e-5
//   compute_s = 4.7710208e-5 + 3.028e-5 = 7.7990208e-5
constexpr double kGemm = 4.7710208e-5, kElementwise = 3.028e-5, kCompute = 7.7990208e-5;

}  // namespace

TEST(Predictor, ModelIsTheHandCountedSize) {
  EXPECT_EQ(tiny().num_params(), 120576);
}

TEST(Predictor, OneRankStepIsComputeOnly) {
  const PlanInput in = job(1);
  const StrategyPlan p = round_plan(parallel::Strategy::NoShard, {1, 1, 1}, 1);
  const StepPrediction r = predict_step(in, p, table());
  EXPECT_NEAR(r.gemm_s, kGemm, 1e-15);
  EXPECT_NEAR(r.optimizer_s, 2.8e-7, 1e-18);
  EXPECT_NEAR(r.elementwise_s, kElementwise, 1e-15);
  EXPECT_NEAR(r.compute_s, kCompute, 1e-15);
  EXPECT_EQ(r.fsdp_comm_s, 0.0);
  EXPECT_EQ(r.tp_comm_s, 0.0);
  EXPECT_NEAR(r.step_seconds_overlap, kCompute, 1e-15);
  EXPECT_NEAR(r.tokens_per_s, 64 / kCompute, 1e-3);  // global batch 2 x 32 tokens
}

TEST(Predictor, TwoRankFullShardExposesTheFillAndWhatComputeCannotCover) {
  const PlanInput in = job(2);
  StrategyPlan p = round_plan(parallel::Strategy::FullShard, {1, 2, 1}, 2);
  CommVolume& v = p.comm;
  v.fsdp_gather = 4e6;           // 8 all-gathers, half of them re-gathers for backward
  v.fsdp_gather_backward = 2e6;
  v.gather_collectives = 8;
  v.fsdp_reduce = 2e6;           // 4 reduce-scatters
  v.reduce_collectives = 4;
  v.fill_gather = 1e6;
  v.fill_reduce = 5e5;
  // Ring over 2 ranks inside the node: one step (10 us) per collective + bytes / 1e11.
  //   forward gathers  4 x 1e-5 + 2e6 / 1e11 = 6e-5; backward re-gathers the same, 6e-5
  //   reduce-scatters  4 x 1e-5 + 2e6 / 1e11 = 6e-5          fsdp_comm = 1.8e-4
  //   fill: gathers 2 x 1e-5 + 1e6 / 1e11 = 3e-5, reduction 1e-5 + 5e5 / 1e11 = 1.5e-5
  // Compute per rank is as on one rank (64 tokens); what overlaps is compute - optimizer
  // = 7.7710208e-5, a third of it forward (2.5903403e-5), two thirds backward (5.1806805e-5):
  //   exposed = 3e-5 + 1.5e-5 + (6e-5 - 3e-5 - fwd) + (1.2e-4 - 1.5e-5 - bwd)
  //           = 1.8e-4 - 7.7710208e-5 = 1.02289792e-4
  //   step = 7.7990208e-5 + 1.02289792e-4 = 1.8028e-4
  const StepPrediction r = predict_step(in, p, table());
  EXPECT_NEAR(r.compute_s, kCompute, 1e-15);
  EXPECT_NEAR(r.fsdp_comm_s, 1.8e-4, 1e-15);
  EXPECT_NEAR(r.exposed_fsdp_s, 1.02289792e-4, 1e-15);
  EXPECT_NEAR(r.step_seconds_no_overlap, kCompute + 1.8e-4, 1e-15);
  EXPECT_NEAR(r.step_seconds_overlap, 1.8028e-4, 1e-15);
  EXPECT_NEAR(r.tokens_per_s, 128 / 1.8028e-4, 1e-3);  // global batch 2 x 2 ranks x 32 tokens

  // Half the hideable part hides: exposed += 0.5 x (1.8e-4 - 1.02289792e-4) = 3.8855104e-5.
  CostModelInputs half = table();
  half.overlap = 0.5;
  EXPECT_NEAR(predict_step(in, p, half).step_seconds_overlap, 1.8028e-4 + 3.8855104e-5, 1e-15);
}

TEST(Predictor, TensorParallelAllReducesPayTheirRingAndTheSyncCost) {
  const PlanInput in = job(2);
  StrategyPlan p = round_plan(parallel::Strategy::NoShard, {1, 1, 2}, 1);
  p.comm.tp = 1e6;
  p.comm.tp_collectives = 10;
  CostModelInputs c = table();
  c.sync_s = {0.0, 0.0, 1e-4};  // a blocking all-reduce over 2 ranks waits 100 us for its peer
  // Ring all-reduce over 2 ranks: 2 steps each, 10 x 2 x 1e-5 + 1e6 / 1e11 = 2.1e-4;
  // plus 10 x 1e-4 of synchronisation = 1.21e-3. GEMMs are split over tp = 2:
  // gemm_s = kGemm / 2 = 2.3855104e-5.
  const StepPrediction r = predict_step(in, p, c);
  EXPECT_NEAR(r.tp_comm_s, 1.21e-3, 1e-15);
  EXPECT_NEAR(r.gemm_s, kGemm / 2, 1e-15);
}

TEST(Predictor, ConstantsComeFromTheOneTable) {
  const PlanInput in = job(1);
  const StrategyPlan p = round_plan(parallel::Strategy::NoShard, {1, 1, 1}, 1);
  CostModelInputs c = table();
  c.constants.elementwise_passes = 10;      // 10 x 1e6 / 2 / 1e11 = 5e-5
  c.constants.adamw_bytes_per_element = 0;  // no optimizer term
  EXPECT_NEAR(predict_step(in, p, c).elementwise_s, 5e-5, 1e-15);
}

TEST(Predictor, MemoryOfOneAndTwoRanksIsTheHandCount) {
  PlanInput in = job(1);
  // no_shard, fp32, one rank: master + gradient + two moments, 16 B per parameter.
  const StrategyPlan one = plan_strategy(in, parallel::Strategy::NoShard, {1, 1, 1});
  ASSERT_TRUE(one.valid);
  EXPECT_EQ(one.memory.persistent(), 16.0 * 120576);  // 1929216 B
  EXPECT_EQ(one.memory.gathered, 0.0);                // fp32 computes on the master copy
  // full_shard over 2 ranks: each unit's half, aligned up to 64 elements:
  //   outer 20608 / 2 = 10304 (= 161 x 64), block 49984 / 2 = 24992 -> 25024 (391 x 64)
  //   state per rank 10304 + 2 x 25024 = 60352 -> 16 x 60352 = 965632 B
  // Gathered in fp32: the outer unit whole (20608) and 1 + prefetch = 2 whole blocks
  // (2 x 25024 = 50048 each): 4 x (20608 + 2 x 50048) = 482816 B.
  in = job(2);
  const StrategyPlan two = plan_strategy(in, parallel::Strategy::FullShard, {1, 2, 1});
  ASSERT_TRUE(two.valid);
  EXPECT_EQ(two.memory.persistent(), 16.0 * 60352);
  EXPECT_EQ(two.memory.gathered, 4.0 * (20608 + 2 * 50048));
  // The batch split is BatchSpec::resolved's: global batch 2 x 2 ranks x 1 micro-step.
  EXPECT_EQ(two.batch.global_batch, 4);
  EXPECT_EQ(two.batch.grad_accum, 1);
}

TEST(Predictor, LoraStepCountsNoBaseWeightGradients) {
  // The tiny GPT-2 with LoRA rank 4 on c_attn (A 4 x 64 = 256, B 192 x 4 = 768: 1024 per
  // block, 2048 in all; adapter forward 2 x 2048 = 4096 FLOP per token). Per token:
  //   forward  = base 229376 + adapters 4096 + attention 16384             = 249856
  //   backward = base input gradients 229376 (no weight gradients: frozen)
  //            + adapters 2 x 4096 + attention 2 x 16384 + scores again 8192 = 278528
  //   gemm_s = 528384 x 64 / 1e12 = 3.3816576e-5 (full fine-tuning: kGemm = 4.7710208e-5)
  PlanInput in = job(1);
  in.dims.lora_rank = 4;
  in.dims.lora_targets = {"c_attn"};
  in.dims.lora_target_ids = {0};
  const StrategyPlan p = round_plan(parallel::Strategy::NoShard, {1, 1, 1}, 1);
  const StepPrediction r = predict_step(in, p, table());
  EXPECT_NEAR(r.gemm_s, 3.3816576e-5, 1e-15);
}
