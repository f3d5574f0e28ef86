#include "meshtrain/app/run_spec_resolve.hpp"

#include <sstream>
#include <tuple>

#include "meshtrain/config/config.hpp"
#include "meshtrain/train/mesh_search.hpp"

namespace meshtrain::app {

model::ModelSettings model_settings(const ModelConfig& m) {
  model::ModelSettings s;
  s.family = m.family;
  s.vocab_size = m.vocab_size;
  s.vocab_pad_multiple = m.vocab_pad_multiple;
  s.d_model = m.d_model;
  s.n_layers = m.n_layers;
  s.n_heads = m.n_heads;
  s.n_kv_heads = m.n_kv_heads;
  s.ffn_dim = m.ffn_dim;
  s.max_seq_len = m.max_seq_len;
  s.tie_embeddings = m.tie_embeddings;
  s.norm_eps = m.norm_eps;
  s.rope_theta = m.rope_theta;
  s.init_std = m.init_std;
  s.lora_rank = m.lora_rank;
  s.lora_alpha = m.lora_alpha;
  // "auto" is PEFT's default for the family; otherwise a comma list, blanks around names
  // and empty entries ignored (the model module checks each name against the family).
  std::stringstream list(m.lora_targets == "auto" ? model::lora_auto_targets(m.family) : m.lora_targets);
  for (std::string t; std::getline(list, t, ',');) {
    t.erase(0, t.find_first_not_of(' '));
    t.erase(t.find_last_not_of(' ') + 1);
    if (!t.empty()) s.lora_targets.push_back(t);
  }
  return s;
}

model::ModelDims resolve_model(const ModelConfig& m) { return model::resolve_dims(model_settings(m)); }

train::ResumeSpec resume_spec(const std::string& setting) {
  train::ResumeSpec r;
  if (setting == "auto") r.kind = train::ResumeSpec::Kind::Auto;
  else if (setting == "none") r.kind = train::ResumeSpec::Kind::None;
  else r = {train::ResumeSpec::Kind::Path, setting};
  return r;
}

std::string checkpoint_dir(const Config& c) {
  return c.checkpoint.dir.empty() ? c.output.dir + "/checkpoints" : c.checkpoint.dir;
}

train::RunSpec resolve_spec(const Config& c) {
  validate_config(c);
  train::RunSpec s;
  s.dims = resolve_model(c.model);
  const TrainConfig& t = c.train;
  s.batch = {t.micro_batch, t.seq_len, t.grad_accum, t.global_batch};

  train::TrainSpec& ts = s.train;
  ts.steps = t.steps;
  ts.lr = t.lr;
  ts.min_lr = t.min_lr;
  ts.warmup_steps = t.warmup_steps;
  ts.lr_schedule = t.lr_schedule;
  ts.weight_decay = t.weight_decay;
  ts.beta1 = t.beta1;
  ts.beta2 = t.beta2;
  ts.adam_eps = t.adam_eps;
  ts.decay_embeddings = t.decay_embeddings;
  ts.grad_clip = t.grad_clip;
  ts.precision = t.precision;
  ts.activation_checkpointing = t.activation_checkpointing;
  ts.seed = t.seed;
  ts.eval_every = t.eval_every;
  ts.eval_batches = t.eval_batches;
  ts.log_every = t.log_every;
  ts.time_limit = t.time_limit;
  ts.time_limit_margin = t.time_limit_margin;
  ts.max_skipped_steps = t.max_skipped_steps;
  if (!t.inject_nan_steps.empty()) ts.inject_nan_steps = parse_int_list("train.inject_nan_steps", t.inject_nan_steps);
  ts.inject_nan_rank = t.inject_nan_rank;
  ts.peak_tflops = t.peak_tflops;
  ts.sample_prompt = t.sample_prompt;
  ts.sample_tokens = t.sample_tokens;
  ts.sample_temperature = t.sample_temperature;
  ts.sample_top_k = t.sample_top_k;

  const ParallelConfig& p = c.parallel;
  train::ParallelSpec& ps = s.parallel;
  ps.mesh = {p.dp_replicate, p.dp_shard, p.tp};
  ps.strategy = p.strategy;
  ps.backend = p.backend;
  ps.prefetch = p.prefetch;
  ps.reduce_dtype = p.reduce_dtype == ReduceDtype::Bf16 ? DType::BF16 : DType::F32;
  if (!p.memory_limit.empty()) ps.memory_limit = train::ByteSize{parse_bytes("parallel.memory_limit", p.memory_limit), p.memory_limit};
  ps.memory_headroom = p.memory_headroom;
  ps.collective_timeout = p.collective_timeout;

  const PlanConfig& pl = c.plan;
  train::PlanTarget& pt = s.plan;
  pt.world_size = pl.world_size;
  pt.gpus_per_node = pl.gpus_per_node;
  if (!pl.device_memory.empty()) pt.device_memory = train::ByteSize{parse_bytes("plan.device_memory", pl.device_memory), pl.device_memory};
  pt.gemm_tflops = pl.gemm_tflops;
  if (!pl.bus_gbps.empty()) std::tie(pt.intra_bus_gbps, pt.inter_bus_gbps) = parse_bus_gbps("plan.bus_gbps", pl.bus_gbps);
  pt.mem_gbps = pl.mem_gbps;

  train::CheckpointSpec& cs = s.checkpoint;
  cs.dir = checkpoint_dir(c);
  cs.dir_given = !c.checkpoint.dir.empty();
  cs.every = c.checkpoint.every;
  cs.keep = c.checkpoint.keep;
  cs.resume = resume_spec(c.checkpoint.resume);
  cs.init_from = c.checkpoint.init_from;
  cs.save_final = c.checkpoint.save_final;

  s.data = c.data.dir == "random" ? data::DataSource::random() : data::DataSource::directory(c.data.dir);
  s.output = {c.output.dir, c.output.log_all_ranks, c.output.log_level};
  s.given.grad_accum = c.is_set("train.grad_accum");
  s.given.lora_options_on_command_line =
      c.command_line_keys.count("model.lora_alpha") > 0 || c.command_line_keys.count("model.lora_targets") > 0;
  return s;
}

namespace {

/// The effective configuration texts of a resolved run: the config with the planner's
/// choices in it (logged, stored in checkpoints) and, for the run record, also with
/// train.grad_accum as resolved (with train.global_batch set it is derived, and the file
/// would otherwise hold a value that the global batch overrides: a warning on reuse).
train::RunSetup with_effective_config(const Config& config, train::RunSetup setup) {
  Config effective = config;
  effective.parallel.dp_replicate = setup.spec.parallel.mesh.dp_replicate;
  effective.parallel.dp_shard = setup.spec.parallel.mesh.dp_shard;
  effective.parallel.tp = setup.spec.parallel.mesh.tp;
  effective.train.micro_batch = setup.spec.batch.micro_batch;
  effective.train.activation_checkpointing = setup.spec.train.activation_checkpointing;
  setup.config_ini = config_to_ini(effective);
  effective.train.grad_accum = setup.batch.grad_accum;
  setup.record_ini = config_to_ini(effective);
  return setup;
}

}  // namespace

train::RunSetup resolve_run(const Config& config, const Topology& topo, const train::CostModelInputs* costs) {
  return with_effective_config(config, train::resolve_run(resolve_spec(config), topo, costs));
}

train::RunSetup resolve_run(const Config& config, const Runtime& rt) {
  return with_effective_config(config, train::resolve_run(resolve_spec(config), rt));
}

}  // namespace meshtrain::app
