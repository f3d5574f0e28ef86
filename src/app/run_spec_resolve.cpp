#include "app/run_spec_resolve.hpp"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/gguf_base.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "plan/mesh_search.hpp"

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
  s.base_quant = m.base_quant;
  s.base_quant_embeddings = m.base_quant_embeddings;
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

checkpoint::ResumeSpec resume_spec(const std::string& setting) {
  checkpoint::ResumeSpec r;
  if (setting == "auto") r.kind = checkpoint::ResumeSpec::Kind::Auto;
  else if (setting == "none") r.kind = checkpoint::ResumeSpec::Kind::None;
  else r = {checkpoint::ResumeSpec::Kind::Path, setting};
  return r;
}

std::string checkpoint_dir(const Config& c) {
  return c.checkpoint.dir.empty() ? c.output.dir + "/checkpoints" : c.checkpoint.dir;
}

/// model.base_quant=gguf: the block types of the GGUF base the run loads (the weights of
/// eval/generate, else checkpoint.init_from), which the planner and the engine lay the frozen
/// shards out by. UserError naming the fix when there is no GGUF base.
model::BaseFormats gguf_base_formats(const Config& c, const model::ModelDims& dims) {
  const bool loaded = !c.loaded_weights.empty();
  std::string weights = loaded ? c.loaded_weights : c.checkpoint.init_from;
  std::string what = (loaded ? "--checkpoint " : "checkpoint.init_from=") + weights;
  if (weights.empty()) {
    // A resume without checkpoint.init_from: the base its checkpoint names (no checkpoint,
    // or one that cannot be found: the message below, or the trainer's resume, says so).
    try {
      weights = checkpoint::resolve_resume(checkpoint_dir(c), resume_spec(c.checkpoint.resume));
      what = "the checkpoint to resume from, " + weights + ",";
    } catch (const UserError&) {
    }
  }
  const std::string fix = "use a .gguf base (checkpoint.init_from=FILE.gguf, or a LoRA checkpoint whose base is one), "
                          "or model.base_quant=nf4 (the base re-quantized) or none";
  MESHTRAIN_REQUIRE(!weights.empty(),
                    "model.base_quant=gguf keeps the frozen base in the blocks of its GGUF file, but no base weights "
                    "are given (checkpoint.init_from is empty): %s",
                    fix.c_str());
  const std::string path = checkpoint::gguf_base_of(weights, what);
  MESHTRAIN_REQUIRE(!path.empty(),
                    "model.base_quant=gguf keeps the frozen base in the blocks of its GGUF file, but %s is neither a "
                    "GGUF file nor a LoRA checkpoint whose base is one: %s",
                    what.c_str(), fix.c_str());
  return checkpoint::gguf_base_formats(path, dims);
}

plan::RunSpec resolve_spec(const Config& c) {
  validate_config(c);
  plan::RunSpec s;
  s.dims = resolve_model(c.model);
  s.kernel_paths.fused_loss = c.gpu.fused_loss;
  s.kernel_paths.fused_norms = c.gpu.fused_norms;
  s.kernel_paths.row_packs = c.gpu.row_packs;
  if (c.gpu.norm_form != NormFormChoice::Auto)  // else the build's default: kernels::default_norm_form()
    s.kernel_paths.norm_form =
        c.gpu.norm_form == NormFormChoice::Warps ? kernels::NormForm::Warps : kernels::NormForm::Rows;
  s.kernel_paths.epilogues = c.gpu.epilogues;
  const TrainConfig& t = c.train;
  s.batch = {t.micro_batch, t.seq_len, t.grad_accum, t.global_batch};

  plan::TrainSpec& ts = s.train;
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
  ts.sample_top_p = t.sample_top_p;
  ts.sample_min_p = t.sample_min_p;
  ts.fused_optimizer = c.gpu.fused_optimizer;
  ts.graphs = c.gpu.graphs;
  ts.attention = c.gpu.attention;
  ts.objective = t.objective;
  ts.dpo_beta = t.dpo_beta;
  ts.simpo_beta = t.simpo_beta;
  ts.simpo_gamma = t.simpo_gamma;

  const ParallelConfig& p = c.parallel;
  plan::ParallelSpec& ps = s.parallel;
  ps.mesh_request = {p.dp_replicate, p.dp_shard, p.tp};
  ps.strategy = p.strategy;
  ps.backend = p.backend;
  ps.prefetch = p.prefetch;
  ps.reduce_dtype = p.reduce_dtype == ReduceDtype::Bf16 ? DType::BF16 : DType::F32;
  if (!p.memory_limit.empty()) ps.memory_limit = plan::ByteSize{parse_bytes("parallel.memory_limit", p.memory_limit), p.memory_limit};
  ps.memory_headroom = p.memory_headroom;
  ps.collective_timeout = p.collective_timeout;

  const PlanConfig& pl = c.plan;
  plan::PlanTarget& pt = s.plan_target;
  pt.world_size = pl.world_size;
  pt.gpus_per_node = pl.gpus_per_node;
  if (!pl.device_memory.empty()) pt.device_memory = plan::ByteSize{parse_bytes("plan.device_memory", pl.device_memory), pl.device_memory};
  pt.gemm_tflops = pl.gemm_tflops;
  if (!pl.bus_gbps.empty()) std::tie(pt.intra_bus_gbps, pt.inter_bus_gbps) = parse_bus_gbps("plan.bus_gbps", pl.bus_gbps);
  pt.mem_gbps = pl.mem_gbps;

  plan::CheckpointSpec& cs = s.checkpoint;
  cs.dir = checkpoint_dir(c);
  cs.dir_given = !c.checkpoint.dir.empty();
  cs.every = c.checkpoint.every;
  cs.keep = c.checkpoint.keep;
  cs.resume = resume_spec(c.checkpoint.resume);
  cs.overwrite = c.checkpoint.overwrite;
  cs.init_from = c.checkpoint.init_from;
  if (s.dims.base_quant == BaseQuant::Gguf) s.dims.base_formats = gguf_base_formats(c, s.dims);
  cs.save_final = c.checkpoint.save_final;
  cs.async = c.checkpoint.async;

  s.data = c.data.dir == "random" ? data::DataSource::random() : data::DataSource::directory(c.data.dir);
  s.data.document_mask = c.data.document_mask;
  s.output = {c.output.dir, c.output.log_all_ranks, c.output.log_level};
  s.given.grad_accum = c.is_set("train.grad_accum");
  s.given.lora_options_on_command_line =
      c.command_line_keys.count("model.lora_alpha") > 0 || c.command_line_keys.count("model.lora_targets") > 0;
  return s;
}

namespace {

/// `ini` (config_to_ini's text) with the line of `key` ("train.grad_accum") replaced by
/// `lines` (each ending in '\n').
std::string replace_key_line(const std::string& ini, const std::string& key, const std::string& lines) {
  const std::string section = "[" + key.substr(0, key.find('.')) + "]\n";
  const std::string line = "\n" + key.substr(key.find('.') + 1) + " = ";
  const std::size_t at = ini.find(section);
  const std::size_t start = at == std::string::npos ? at : ini.find(line, at);
  if (start == std::string::npos) return ini;
  const std::size_t end = ini.find('\n', start + 1);
  return ini.substr(0, start + 1) + lines + (end == std::string::npos ? "" : ini.substr(end + 1));
}

/// The effective configuration texts of a resolved run. config_ini (logged, stored in
/// checkpoints) has the resolved mesh, micro-batch and checkpointing in it. record_ini (the run's config.ini) is the
/// file that reruns the run, on any number of ranks: it holds what was asked, every value
/// meshtrain chose or derived for this job's ranks as a comment. A resolved mesh,
/// micro_batch or grad_accum written as a key would read back as set by the user -- on
/// another rank count a mesh that does not fit, or "train.global_batch wins over
/// train.grad_accum" for a value nobody gave.
plan::RunSetup with_effective_config(const Config& config, plan::RunSetup setup) {
  Config effective = config;
  effective.parallel.dp_replicate = setup.mesh_shape.dp_replicate;
  effective.parallel.dp_shard = setup.mesh_shape.dp_shard;
  effective.parallel.tp = setup.mesh_shape.tp;
  effective.train.micro_batch = setup.batch.micro_batch;
  effective.train.activation_checkpointing = setup.activation_checkpointing;
  setup.config_ini = config_to_ini(effective);

  Config record = config;
  // A checkpoint.resume=PATH given once would resume that old step again at every rerun
  // (dropping the newer metrics), and none would start over; auto continues the run from
  // its newest checkpoint. train::write_run_record adds a comment naming what was given
  // and where this run started.
  record.checkpoint.resume = "auto";
  // A rerun continues the run; one given checkpoint.resume=none later must not inherit a
  // deletion of the run's checkpoints from this file.
  record.checkpoint.overwrite = false;
  std::string ini = config_to_ini(record);
  const int ranks = setup.mesh_shape.world();
  const auto chosen = [&](const char* key, const std::string& asked, const std::string& value) {
    if (asked == value) return;
    const std::string name = std::string(key).substr(std::string(key).find('.') + 1);
    ini = replace_key_line(ini, key,
                           strprintf("# %s = %s was resolved for this run's %d rank(s)\n%s = %s\n",
                                     name.c_str(), value.c_str(), ranks, name.c_str(), asked.c_str()));
  };
  chosen("parallel.dp_replicate", std::to_string(config.parallel.dp_replicate), std::to_string(setup.mesh_shape.dp_replicate));
  chosen("parallel.dp_shard", std::to_string(config.parallel.dp_shard), std::to_string(setup.mesh_shape.dp_shard));
  chosen("parallel.tp", std::to_string(config.parallel.tp), std::to_string(setup.mesh_shape.tp));
  chosen("train.micro_batch", std::to_string(config.train.micro_batch), std::to_string(setup.batch.micro_batch));
  chosen("train.activation_checkpointing", config.train.activation_checkpointing ? "true" : "false",
         setup.activation_checkpointing ? "true" : "false");
  // With train.global_batch set, grad_accum is derived for the job's data-parallel ranks;
  // a grad_accum the user gave stays a key (and its warning, if it disagrees, with it).
  if (config.train.global_batch > 0 && !config.is_set("train.grad_accum"))
    ini = replace_key_line(ini, "train.grad_accum",
                           strprintf("# grad_accum = %d is derived from train.global_batch for this run's %d "
                                     "data-parallel rank(s)\n",
                                     setup.batch.grad_accum, setup.mesh_shape.dp()));
  setup.record_ini = ini;
  return setup;
}

}  // namespace

plan::RunSetup resolve_run(const Config& config, const Topology& topo, const plan::CostModelInputs* costs) {
  return with_effective_config(config, plan::resolve_run(resolve_spec(config), topo, costs));
}

plan::RunSetup resolve_run(const Config& config, const Runtime& rt) {
  return with_effective_config(config, plan::resolve_run(resolve_spec(config), rt));
}

plan::RunSetup resolve_eval_run(const Config& config, const Runtime& rt) {
  plan::RunSpec spec = resolve_spec(config);
  spec.use = plan::ModelUse::Evaluate;
  return with_effective_config(config, plan::resolve_run(spec, rt));
}

plan::RunSetup resolve_generate_run(const Config& config, const Runtime& rt, int positions, bool kv_cache) {
  plan::RunSpec spec = resolve_spec(config);
  spec.use = plan::ModelUse::Generate;
  // Every rank runs the same one sequence; the training batch keys mean nothing here (a
  // train.seq_len longer than the model's window must not stop a generation).
  spec.batch = plan::BatchSpec{1, std::max(1, positions), 1, 0};
  spec.kv_cache_positions = kv_cache ? spec.batch.seq_len : 0;
  return with_effective_config(config, plan::resolve_run(spec, rt));
}

std::optional<checkpoint::StoredChoices> resumed_choices(const plan::RunSpec& spec, const Runtime& rt) {
  std::string path;
  try {
    path = checkpoint::resolve_resume(rt.world(), spec.checkpoint.dir, spec.checkpoint.resume);
  } catch (const UserError&) {
    return std::nullopt;  // every rank alike; the trainer's resume names the problem
  }
  if (path.empty()) return std::nullopt;
  checkpoint::StoredChoices stored = checkpoint::stored_choices(rt.world(), path);
  if (!stored.recorded) return std::nullopt;
  return stored;
}

plan::RunSetup resolve_training_run(const Config& config, const Runtime& rt) {
  const plan::RunSpec spec = resolve_spec(config);
  const std::optional<checkpoint::StoredChoices> kept = resumed_choices(spec, rt);
  return with_effective_config(config, plan::resolve_run(spec, rt, kept ? &*kept : nullptr));
}

}  // namespace meshtrain::app
