#include "train/memory_ways_out.hpp"

#include <vector>

#include "core/format.hpp"
#include "parallel/strategy.hpp"

namespace meshtrain::train {

namespace {

/// "a, b or c".
std::string one_of(const std::vector<std::string>& ways) {
  std::string text;
  for (std::size_t i = 0; i < ways.size(); ++i)
    text += (i == 0 ? "" : i + 1 == ways.size() ? " or " : ", ") + ways[i];
  return text;
}

/// What every command can change about the weights it holds: more sharding where there is a
/// shard group, a 4-bit base for an unquantized LoRA model.
void add_weight_ways(const plan::RunSetup& setup, std::vector<std::string>& ways) {
  using parallel::Strategy;
  // Sharding the parameters only helps where there is a shard group to spread them over.
  if (setup.strategy != Strategy::FullShard && setup.mesh_shape.dp_shard > 1)
    ways.push_back(strprintf("more sharding: parallel.strategy=full_shard (this run: %s)",
                             parallel::strategy_name(setup.strategy)));
  // A LoRA run's frozen base kept in the compute dtype: QLoRA stores it in 4 bits.
  if (setup.spec.dims.lora_rank > 0 && setup.spec.dims.base_quant == BaseQuant::None)
    ways.emplace_back("a 4-bit frozen base: model.base_quant=nf4");
}

}  // namespace

std::string memory_ways_out(const plan::RunSetup& setup) {
  std::vector<std::string> ways;
  const int micro_batch = setup.batch.micro_batch;
  if (micro_batch > 1) ways.push_back(strprintf("a smaller train.micro_batch (this run: %d)", micro_batch));
  if (!setup.activation_checkpointing) ways.emplace_back("train.activation_checkpointing=true");
  add_weight_ways(setup, ways);
  // Nothing per micro-batch left to cut but the window itself.
  if (micro_batch <= 1 && setup.activation_checkpointing)
    ways.push_back(strprintf("a shorter train.seq_len (this run: %d)", setup.batch.seq_len));
  ways.emplace_back("more ranks");
  return one_of(ways);
}

std::string eval_memory_ways_out(const plan::RunSetup& setup) {
  // No backward: activation checkpointing saves nothing; a window's activations are one
  // micro-batch of train.seq_len tokens.
  std::vector<std::string> ways;
  const int micro_batch = setup.batch.micro_batch;
  if (micro_batch > 1) ways.push_back(strprintf("a smaller train.micro_batch (this run: %d)", micro_batch));
  else ways.push_back(strprintf("a shorter train.seq_len (this run: %d)", setup.batch.seq_len));
  add_weight_ways(setup, ways);
  ways.emplace_back("more ranks");
  return one_of(ways);
}

std::string generate_memory_ways_out(const plan::RunSetup& setup, int tokens) {
  // One sequence: what grows is the KV cache, which holds the prompt and the new tokens.
  std::vector<std::string> ways;
  ways.push_back(strprintf("fewer --tokens (this run: %d; the KV cache holds the prompt and them)", tokens));
  add_weight_ways(setup, ways);
  ways.emplace_back("more ranks");
  return one_of(ways);
}

}  // namespace meshtrain::train
