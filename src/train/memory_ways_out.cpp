#include "train/memory_ways_out.hpp"

#include <vector>

#include "core/format.hpp"
#include "parallel/strategy.hpp"

namespace meshtrain::train {

std::string memory_ways_out(const plan::RunSetup& setup) {
  using parallel::Strategy;
  std::vector<std::string> ways;
  const int micro_batch = setup.batch.micro_batch;
  if (micro_batch > 1) ways.push_back(strprintf("a smaller train.micro_batch (this run: %d)", micro_batch));
  if (!setup.activation_checkpointing) ways.emplace_back("train.activation_checkpointing=true");
  // Sharding the parameters only helps where there is a shard group to spread them over.
  if (setup.strategy != Strategy::FullShard && setup.mesh_shape.dp_shard > 1)
    ways.push_back(strprintf("more sharding: parallel.strategy=full_shard (this run: %s)",
                             parallel::strategy_name(setup.strategy)));
  // A LoRA run's frozen base kept in the compute dtype: QLoRA stores it in 4 bits.
  if (setup.spec.dims.lora_rank > 0 && setup.spec.dims.base_quant == BaseQuant::None)
    ways.emplace_back("a 4-bit frozen base: model.base_quant=nf4");
  // Nothing per micro-batch left to cut but the window itself.
  if (micro_batch <= 1 && setup.activation_checkpointing)
    ways.push_back(strprintf("a shorter train.seq_len (this run: %d)", setup.batch.seq_len));
  ways.emplace_back("more ranks");
  std::string text;
  for (std::size_t i = 0; i < ways.size(); ++i)
    text += (i == 0 ? "" : i + 1 == ways.size() ? " or " : ", ") + ways[i];
  return text;
}

}  // namespace meshtrain::train
