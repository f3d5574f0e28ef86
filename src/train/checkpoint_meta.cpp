#include "train/checkpoint_meta.hpp"

#include "data/sampler.hpp"

namespace meshtrain::train {

checkpoint::CheckpointMeta checkpoint_meta(const plan::RunSetup& setup) {
  const plan::TrainSpec& tc = setup.spec.train;
  checkpoint::CheckpointMeta m;
  m.dims = setup.spec.dims;
  m.mesh_shape = setup.mesh_shape;
  m.strategy = setup.strategy;
  m.seq_len = setup.batch.seq_len;
  m.micro_batch = setup.batch.micro_batch;
  m.global_batch = setup.batch.global_batch;
  m.grad_accum = setup.batch.grad_accum;
  m.activation_checkpointing = setup.activation_checkpointing;
  m.ranks_per_node = setup.ranks_per_node;
  m.lr_schedule = tc.lr_schedule;
  m.lr = tc.lr;
  m.min_lr = tc.min_lr;
  m.warmup_steps = tc.warmup_steps;
  m.total_steps = tc.steps;
  m.precision = tc.precision;
  m.config_ini = setup.config_ini;
  m.keep = setup.spec.checkpoint.keep;
  return m;
}

std::vector<std::uint64_t> next_step_windows(std::uint64_t cursor, const plan::RunSetup& setup) {
  const int dp = setup.mesh_shape.dp();
  std::vector<std::uint64_t> w(static_cast<std::size_t>(dp));
  for (int d = 0; d < dp; ++d) w[d] = data::rank_first_window(cursor, 0, setup.batch.micro_batch, dp, d);
  return w;
}

}  // namespace meshtrain::train
