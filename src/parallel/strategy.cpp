#include "meshtrain/parallel/strategy.hpp"

#include "meshtrain/core/error.hpp"

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

Strategy parse_strategy(const std::string& n) {
  if (n == "full_shard") return Strategy::FullShard;
  if (n == "shard_grad_op") return Strategy::ShardGradOp;
  if (n == "no_shard") return Strategy::NoShard;
  if (n == "hybrid_shard") return Strategy::HybridShard;
  throw UserError(strprintf("parallel.strategy = '%s' is not valid; expected auto, full_shard, shard_grad_op, "
                            "no_shard or hybrid_shard", n.c_str()));
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
