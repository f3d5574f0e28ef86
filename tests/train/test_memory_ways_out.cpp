// What an out-of-memory message tells a training run to change (train/memory_ways_out): only
// the changes the run has not made, and the message as the command line prints it.
#include <gtest/gtest.h>

#include <string>

#include "core/memory.hpp"
#include "train/memory_ways_out.hpp"

using namespace meshtrain;
using parallel::Strategy;

namespace {

plan::RunSetup setup_of(int micro_batch, bool checkpointing, Strategy strategy, int dp_shard) {
  plan::RunSetup s;
  s.batch.micro_batch = micro_batch;
  s.batch.seq_len = 1024;
  s.activation_checkpointing = checkpointing;
  s.strategy = strategy;
  s.mesh_shape.dp_shard = dp_shard;
  return s;
}

TEST(MemoryWaysOut, NamesOnlyWhatTheRunCanStillChange) {
  EXPECT_EQ(train::memory_ways_out(setup_of(8, false, Strategy::NoShard, 4)),
            "a smaller train.micro_batch (this run: 8), train.activation_checkpointing=true, more sharding: "
            "parallel.strategy=full_shard (this run: no_shard) or more ranks");
  // Already fully sharded, checkpointing on: the micro-batch and more ranks are left.
  EXPECT_EQ(train::memory_ways_out(setup_of(2, true, Strategy::FullShard, 4)),
            "a smaller train.micro_batch (this run: 2) or more ranks");
  // One rank: a strategy shards over nothing, so none is suggested.
  EXPECT_EQ(train::memory_ways_out(setup_of(2, false, Strategy::ShardGradOp, 1)),
            "a smaller train.micro_batch (this run: 2), train.activation_checkpointing=true or more ranks");
  // Nothing per micro-batch left but the window.
  EXPECT_EQ(train::memory_ways_out(setup_of(1, true, Strategy::FullShard, 2)),
            "a shorter train.seq_len (this run: 1024) or more ranks");
}

TEST(MemoryWaysOut, ALoraRunIsToldOfAFourBitBase) {
  plan::RunSetup s = setup_of(1, true, Strategy::FullShard, 1);
  s.spec.dims.lora_rank = 8;
  EXPECT_EQ(train::memory_ways_out(s),
            "a 4-bit frozen base: model.base_quant=nf4, a shorter train.seq_len (this run: 1024) or more ranks");
  s.spec.dims.base_quant = BaseQuant::Nf4;
  EXPECT_EQ(train::memory_ways_out(s), "a shorter train.seq_len (this run: 1024) or more ranks");
}

TEST(MemoryWaysOut, EvalAndGenerateAreToldTheirOwnWays) {
  // No backward: never activation checkpointing; at micro-batch 1 the window.
  plan::RunSetup s = setup_of(8, false, Strategy::NoShard, 2);
  EXPECT_EQ(train::eval_memory_ways_out(s),
            "a smaller train.micro_batch (this run: 8), more sharding: parallel.strategy=full_shard (this run: "
            "no_shard) or more ranks");
  s = setup_of(1, false, Strategy::FullShard, 2);
  s.spec.dims.lora_rank = 4;
  EXPECT_EQ(train::eval_memory_ways_out(s),
            "a shorter train.seq_len (this run: 1024), a 4-bit frozen base: model.base_quant=nf4 or more ranks");
  // One sequence: the KV cache.
  EXPECT_EQ(train::generate_memory_ways_out(setup_of(8, false, Strategy::FullShard, 1), 200),
            "fewer --tokens (this run: 200; the KV cache holds the prompt and them) or more ranks");
}

TEST(MemoryWaysOut, TheMessageKeepsThePoolsFactsAndEndsWithPlan) {
  const OutOfDeviceMemory generic("out of device memory: a block of 1 KiB (workspace) could not be allocated");
  EXPECT_EQ(std::string(generic.what()),
            "out of device memory: a block of 1 KiB (workspace) could not be allocated. To need less: a smaller "
            "train.micro_batch, train.activation_checkpointing=true, more sharding (parallel.strategy=full_shard) "
            "or more ranks; `meshtrain plan` shows what each choice needs");
  const OutOfDeviceMemory told(generic.facts(), "more ranks");
  EXPECT_EQ(told.facts(), generic.facts());
  EXPECT_EQ(std::string(told.what()),
            "out of device memory: a block of 1 KiB (workspace) could not be allocated. To need less: more ranks; "
            "`meshtrain plan` shows what each choice needs");
}

}  // namespace
