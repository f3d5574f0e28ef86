#pragma once
/// \brief Sharding strategies and how each one behaves, as data (one table, no switch
/// statements scattered through the engine).

#include <string>

#include "config/choices.hpp"

namespace meshtrain::parallel {

enum class Strategy { FullShard, ShardGradOp, NoShard, HybridShard };

/// What a strategy does, in the terms the FSDP engine needs.
struct StrategyTraits {
  bool shard_params;           ///< master/optimizer state sharded over the dp_shard group
  bool reshard_after_forward;  ///< free gathered params after a block's forward (re-gather for backward)
  bool reduce_every_micro;     ///< reduce-scatter each micro-step (else accumulate locally until the last)
};

StrategyTraits traits(Strategy s);
/// The strategy parallel.strategy forces; not Auto (the planner resolves that).
Strategy forced_strategy(StrategyChoice choice);
const char* strategy_name(Strategy s);

}  // namespace meshtrain::parallel
