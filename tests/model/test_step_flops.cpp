// The FLOPs a training step performs (model/step_flops.hpp), against counts derived by hand
// for a small Llama: what the trainer's MFU and the planner's GEMM time are built on. The
// point of issue 32's item: a frozen LoRA base is credited with no weight gradients.
#include <gtest/gtest.h>

#include "model/step_flops.hpp"
#include "test_support.hpp"

using namespace meshtrain;
using namespace meshtrain::model;

namespace {

// Llama, d_model C = 64, 2 layers, 4 heads of 16 (2 key/value heads: kv width 32),
// ffn 128, vocabulary 256, untied head.
ModelDims llama(int lora_rank) {
  ModelSettings c;
  c.family = choice_of<ModelFamily>("llama");
  c.vocab_size = 256;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 128;
  c.max_seq_len = 32;
  c.tie_embeddings = false;
  c.lora_rank = lora_rank;
  if (lora_rank > 0) c.lora_targets = {"q", "v"};
  return resolve_dims(c);
}

// By hand, per token, seq_len 32:
//   matmul parameters per layer: q 64x64 = 4096, k and v 64x32 = 2048 each, o 4096,
//   gate/up/down 3 x 64x128 = 24576: 36864; x 2 layers + head 256x64 = 16384 -> 90112.
//   base forward 2 x 90112 = 180224; attention forward 4 L T C = 4*2*32*64 = 16384;
//   scores recomputed in backward 2 L T C = 8192.
//   LoRA rank 4 on q (A 4x64, B 64x4: 512) and v (A 4x64, B 32x4: 384): 896 per layer,
//   1792 in all -> adapter forward 3584.
constexpr double kBase = 180224, kAttn = 16384, kScores = 8192, kAdapters = 3584;

}  // namespace

TEST(StepFlops, FullFineTuningIsThreeForwardsPlusTheRecomputedScores) {
  const StepFlops f = train_step_flops(llama(0), 32, false);
  EXPECT_DOUBLE_EQ(f.forward, kBase + kAttn);                          // 196608
  EXPECT_DOUBLE_EQ(f.backward, 2 * kBase + 2 * kAttn + kScores);       // 401408
  EXPECT_DOUBLE_EQ(f.recompute, 0);
  EXPECT_DOUBLE_EQ(f.total(), 598016);
  EXPECT_DOUBLE_EQ(f.total(), 3 * llama(0).flops_per_token_forward(32) + kScores);
}

TEST(StepFlops, FrozenLoraBaseHasNoWeightGradients) {
  const StepFlops f = train_step_flops(llama(4), 32, false);
  EXPECT_DOUBLE_EQ(f.forward, kBase + kAdapters + kAttn);                     // 200192
  EXPECT_DOUBLE_EQ(f.backward, kBase + 2 * kAdapters + 2 * kAttn + kScores);  // 228352
  EXPECT_DOUBLE_EQ(f.total(), 428544);
  // What the trainer credited before: 3 x the base forward, 1.38x too much here.
  EXPECT_GT(3 * llama(4).flops_per_token_forward(32) / f.total(), 1.37);
}

TEST(StepFlops, CheckpointingAddsTheForwardAgain) {
  const StepFlops f = train_step_flops(llama(4), 32, true);
  EXPECT_DOUBLE_EQ(f.recompute, kBase + kAdapters + kAttn);
  EXPECT_DOUBLE_EQ(f.total(), 628736);
}

TEST(StepFlops, DpoAddsTheReferenceForwardAndAHeadPass) {
  // The LM head's forward is 2 x 256 x 64 = 32768 per token. Under LoRA the reference is the
  // base forward with the adapters off (180224 + 16384); without LoRA the reference is
  // computed once before training, so a step adds only the head pass.
  EXPECT_DOUBLE_EQ(train_step_flops(llama(4), 32, false, 1.0, true).dpo_extra, 32768 + kBase + kAttn);
  EXPECT_DOUBLE_EQ(train_step_flops(llama(4), 32, false, 1.0, true).total(), 428544 + 32768 + kBase + kAttn);
  EXPECT_DOUBLE_EQ(train_step_flops(llama(0), 32, false, 1.0, true).total(), 598016 + 32768);
  EXPECT_NE(describe_step_flops(llama(4), false, true).find("reference forward"), std::string::npos);
  // SimPO (no reference): the head pass alone, with or without LoRA; attention not counted twice.
  EXPECT_DOUBLE_EQ(train_step_flops(llama(4), 32, false, 1.0, true, false).dpo_extra, 32768);
  EXPECT_DOUBLE_EQ(train_step_flops(llama(4), 32, false, 1.0, true, false).attention,
                   train_step_flops(llama(4), 32, false).attention);
  EXPECT_EQ(describe_step_flops(llama(4), false, true, false).find("reference forward"), std::string::npos);
}

TEST(StepFlops, PackedRowsCountTheAttentionComputed) {
  // Half the attention tiles skipped: the attention terms halve, the matmuls do not.
  const StepFlops f = train_step_flops(llama(0), 32, false, 0.5);
  EXPECT_DOUBLE_EQ(f.total(), 3 * kBase + 0.5 * (3 * kAttn + kScores));
}

TEST(StepFlops, DescriptionSaysWhatIsCounted) {
  EXPECT_NE(describe_step_flops(llama(4), true).find("no weight gradients"), std::string::npos);
  EXPECT_NE(describe_step_flops(llama(4), true).find("activation checkpointing"), std::string::npos);
  EXPECT_EQ(describe_step_flops(llama(0), false).find("LoRA"), std::string::npos);
}
