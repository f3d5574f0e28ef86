#pragma once
/// \brief The one place where the parsed configuration becomes the typed RunSpec (and,
/// with the job's topology, the RunSetup): every subcommand and the tests go through it, and
/// nothing below app/ sees the Config. Words become enums in the config parser already;
/// here sizes become bytes, lists become vectors, `auto` / `none` become kinds, and the
/// effective configuration is written back as INI text for the run record and checkpoints.

#include <optional>
#include <string>

#include "plan/run_setup.hpp"
#include "plan/run_spec.hpp"

namespace meshtrain {
struct Config;       // the parsed configuration (config module): only app/ and config/ see it
struct ModelConfig;
}  // namespace meshtrain

namespace meshtrain::app {

/// model.* as the model module takes it: model.lora_targets split, `auto` replaced by the
/// family's default (model::lora_auto_targets).
model::ModelSettings model_settings(const ModelConfig& m);
/// model::resolve_dims(model_settings(m)).
model::ModelDims resolve_model(const ModelConfig& m);

/// checkpoint.resume: auto | none | PATH.
checkpoint::ResumeSpec resume_spec(const std::string& setting);

/// checkpoint.dir, or <output.dir>/checkpoints when it is empty.
std::string checkpoint_dir(const Config& config);

/// Validates the config (validate_config) and resolves it into typed settings (UserError
/// naming the key for anything invalid).
plan::RunSpec resolve_spec(const Config& config);

/// plan::resolve_run on resolve_spec(config), plus the effective configuration as INI
/// text (RunSetup::config_ini, RunSetup::record_ini) with the planner's choices in it.
plan::RunSetup resolve_run(const Config& config, const Topology& topo, const plan::CostModelInputs* costs = nullptr);
/// The same for this live job (collective when the planner measures the cost model's inputs).
plan::RunSetup resolve_run(const Config& config, const Runtime& rt);

/// resolve_run as `eval` runs it: train.micro_batch windows of train.seq_len, planned for
/// forward passes only (plan::ModelUse::Evaluate). Collective.
plan::RunSetup resolve_eval_run(const Config& config, const Runtime& rt);
/// resolve_run as `generate` runs it: one sequence of at most `positions` tokens (the
/// prompt and the new ones, at most model.max_seq_len) in place of train.micro_batch and
/// train.seq_len, which generate does not use, with a KV cache of as many positions when
/// `kv_cache`; planned for forward passes only (plan::ModelUse::Generate). Collective.
plan::RunSetup resolve_generate_run(const Config& config, const Runtime& rt, int positions, bool kv_cache);

/// What the checkpoint this run would resume from (checkpoint.resume = auto or PATH)
/// recorded of its resolved shape, for the resolution to keep (plan::keeps); nullopt for a
/// fresh start, a checkpoint written before the record, or one that cannot be found or
/// read now -- the trainer's resume reports that, once it holds the run's directories.
/// Collective.
std::optional<checkpoint::StoredChoices> resumed_choices(const plan::RunSpec& spec, const Runtime& rt);

/// resolve_run as `train` runs it: a resume on the job shape its checkpoint was written on
/// keeps that run's strategy, mesh, micro-batch and checkpointing (resumed_choices). Collective.
plan::RunSetup resolve_training_run(const Config& config, const Runtime& rt);

}  // namespace meshtrain::app
