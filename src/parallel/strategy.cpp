#include "parallel/strategy.hpp"

#include <stdexcept>

#include "core/error.hpp"

namespace meshtrain::parallel {

StrategyTraits traits(Strategy s) {
  switch (s) {
    case Strategy::FullShard: return {true, true, true};
    case Strategy::HybridShard: return {true, true, true};
    case Strategy::ShardGradOp: return {true, false, false};
    case Strategy::NoShard: return {false, false, false};
  }
  return {true, true, true};
}

Strategy forced_strategy(StrategyChoice choice) {
  switch (choice) {
    case StrategyChoice::FullShard: return Strategy::FullShard;
    case StrategyChoice::ShardGradOp: return Strategy::ShardGradOp;
    case StrategyChoice::NoShard: return Strategy::NoShard;
    case StrategyChoice::HybridShard: return Strategy::HybridShard;
    case StrategyChoice::Auto: break;
  }
  throw std::logic_error("forced_strategy: parallel.strategy=auto is resolved by the planner");
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::FullShard: return "full_shard";
    case Strategy::ShardGradOp: return "shard_grad_op";
    case Strategy::NoShard: return "no_shard";
    case Strategy::HybridShard: return "hybrid_shard";
  }
  return "?";
}

}  // namespace meshtrain::parallel
