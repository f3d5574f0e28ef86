#include "model_weights.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "app/run_spec_resolve.hpp"
#include "app/source_model_config.hpp"
#include "checkpoint/checkpoint.hpp"
#include "train/checkpoint_meta.hpp"
#include "checkpoint/weights_path.hpp"
#include "formats/gguf_file.hpp"
#include "comm/agree.hpp"
#include "comm/collectives.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "core/memory.hpp"

namespace meshtrain::app {

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

/// model.lora_targets as the checkpoint stores it: resolved (auto) and in the family's
/// order.
std::string canonical_lora_targets(const ModelConfig& m) {
  const std::vector<std::string> given = model_settings(m).lora_targets;
  std::vector<std::string> out;
  for (const std::string& t : model::lora_target_names(m.family))
    if (std::find(given.begin(), given.end(), t) != given.end()) out.push_back(t);
  return join(out, ",");
}

}  // namespace

WeightsSource resolve_weights(const MpiComm& world, const Config& cfg, const std::string& option) {
  const std::string dir = checkpoint_dir(cfg);
  // Rank 0 resolves the path (file-system lookups); every rank gets its answer or error.
  WeightsSource out;
  int pretrained = 0;
  agree_on_errors(world, [&] {
    if (world.rank() != 0) return;
    if (option.empty()) {
      out.path = checkpoint::resolve_resume(dir, checkpoint::ResumeSpec{});
      MESHTRAIN_REQUIRE(!out.path.empty(),
                        "no checkpoint found in %s: pass --checkpoint PATH (a step_*.h5 file, a checkpoint "
                        "directory or a Hugging Face model directory), or set output.dir (or checkpoint.dir) to "
                        "the training run's",
                        dir.c_str());
      return;
    }
    const checkpoint::WeightsPath w = checkpoint::classify_weights_path(option, "--checkpoint " + option);
    pretrained = w.pretrained() ? 1 : 0;
    out.path = w.path;
  });
  out.pretrained = broadcast_value(world, pretrained) != 0;
  out.path = broadcast_string(world, out.path);
  return out;
}

void adopt_checkpoint_model_on_all(const MpiComm& world, Config& cfg, const WeightsSource& source,
                                   const std::string& checkpoint_option) {
  if (source.pretrained) return;
  // Every rank reads the same attributes and reaches the same verdict; agree_on_errors
  // keeps a rank whose read failed from leaving the others waiting.
  agree_on_errors(world, [&] {
    adopt_checkpoint_model(cfg, source.path, checkpoint_option.empty() ? "checkpoint" : "--checkpoint");
  });
}

void take_lora_from_checkpoint(const MpiComm& world, Config& cfg, const WeightsSource& src) {
  if (src.pretrained) return;  // exports carry no settings: the tensors are matched by name
  checkpoint::LoraSettings stored;
  agree_on_errors(world, [&] {
    if (world.rank() == 0) stored = checkpoint::stored_lora_settings(src.path);
  });
  const bool recorded = broadcast_value(world, stored.recorded);
  stored.rank = broadcast_value(world, stored.rank);
  stored.alpha = broadcast_value(world, stored.alpha);
  stored.targets = broadcast_string(world, stored.targets);
  stored.base_quant = static_cast<BaseQuant>(broadcast_value(world, static_cast<int>(stored.base_quant)));
  stored.base_quant_embeddings = broadcast_value(world, stored.base_quant_embeddings);
  if (!recorded) return;  // an older checkpoint: the loader checks its tensors against the config
  ModelConfig& m = cfg.model;
  const bool differs = m.lora_rank != stored.rank ||
                       (stored.rank > 0 && (m.lora_alpha != stored.alpha ||
                                            canonical_lora_targets(m) != stored.targets ||
                                            m.base_quant != stored.base_quant ||
                                            (stored.base_quant != BaseQuant::None &&
                                             m.base_quant_embeddings != stored.base_quant_embeddings)));
  if (!differs) return;
  const bool user_set = cfg.is_set("model.lora_rank") || cfg.is_set("model.lora_alpha") ||
                        cfg.is_set("model.lora_targets") || cfg.is_set("model.base_quant") ||
                        cfg.is_set("model.base_quant_embeddings");
  const std::string quant =
      m.base_quant == BaseQuant::None
          ? std::string()
          : strprintf(", model.base_quant=%s%s", choice_name(m.base_quant),
                      m.base_quant_embeddings ? "" : ", model.base_quant_embeddings=false");
  const std::string given = m.lora_rank > 0 ? strprintf("model.lora_rank=%d, model.lora_alpha=%g, model.lora_targets=%s%s",
                                                        m.lora_rank, m.lora_alpha, m.lora_targets.c_str(), quant.c_str())
                                            : std::string("no LoRA (model.lora_rank=0)");
  // The adapters are part of the checkpoint's model: evaluating it without them (or with
  // another subset) would silently measure a different model.
  const std::string note = strprintf("%s was trained with %s; using those settings (the configuration says %s)",
                                     src.path.c_str(), stored.str().c_str(), given.c_str());
  if (user_set) log::warn("%s", note.c_str());
  else log::info("%s", note.c_str());
  m.lora_rank = stored.rank;
  if (stored.rank > 0) {
    m.lora_alpha = stored.alpha;
    m.lora_targets = stored.targets;
  }
  m.base_quant = stored.rank > 0 ? stored.base_quant : BaseQuant::None;
  m.base_quant_embeddings = m.base_quant == BaseQuant::None || stored.base_quant_embeddings;
}

void take_seq_len_from_checkpoint(const MpiComm& world, Config& cfg, const WeightsSource& src) {
  if (src.pretrained || cfg.is_set("train.seq_len")) return;  // no record / the user's choice
  const int stored = checkpoint::stored_run_settings(world, src.path).seq_len;
  if (stored <= 0 || stored == cfg.train.seq_len) return;
  log::info("%s was trained with train.seq_len=%d; evaluating windows of that length (the default is %d; give "
            "--train.seq_len to choose)",
            src.path.c_str(), stored, cfg.train.seq_len);
  cfg.train.seq_len = stored;
}

checkpoint::TokenizerRef model_tokenizer_ref(const MpiComm& world, const WeightsSource& source, std::string* name,
                                             std::string* error) {
  if (name) *name = (source.pretrained ? "model " : "checkpoint ") + source.path;
  try {
    return checkpoint::source_tokenizer(world, source.path);
  } catch (const UserError& e) {  // thrown on every rank alike
    if (error) *error = e.what();
    return {};
  }
}

std::unique_ptr<data::Tokenizer> open_model_tokenizer(const checkpoint::TokenizerRef& model, const std::string& model_name,
                                                      const std::string& given, const std::string& fallback,
                                                      const std::string& error) {
  if (!given.empty()) {
    std::unique_ptr<data::Tokenizer> tok = checkpoint::open_tokenizer(given);
    // Another tokenizer's ids mean other text: the loss or the sampled text would be wrong.
    checkpoint::require_same_tokenizer(checkpoint::tokenizer_ref_of(*tok), "--tokenizer " + given, model, model_name);
    return tok;
  }
  if (model.known()) return checkpoint::open_recorded_tokenizer(model, model_name);
  // The model has a tokenizer that cannot be read: bytes would silently be wrong.
  MESHTRAIN_REQUIRE(error.empty(), "%s; give the model's tokenizer with --tokenizer SPEC", error.c_str());
  log::info("the tokenizer of %s is unknown (%s): using %s; give --tokenizer SPEC if the model was trained with "
            "another",
            model_name.c_str(),
            model.recorded ? "it was trained on random tokens"
                           : "it records none: written before checkpoints recorded their tokenizer, or weights "
                             "without tokenizer files",
            fallback == "byte" ? "the byte tokenizer" : fallback.c_str());
  return checkpoint::open_tokenizer(fallback);
}

void log_forward_plan(const char* command, const plan::RunSetup& setup) {
  log::debug("%s: mesh %s, strategy %s (%s)", command, setup.mesh_shape.str().c_str(),
             parallel::strategy_name(setup.strategy), setup.strategy_reason.c_str());
  const MemoryStats& m = MemoryPool::instance().stats();
  log::debug("%s: memory peak %s in use (%s reserved by the pool) after the load; planned %s per rank", command,
             format_bytes(static_cast<double>(m.peak_total_in_use)).c_str(),
             format_bytes(static_cast<double>(m.peak_reserved)).c_str(), format_bytes(setup.memory_planned).c_str());
}

void fit_mesh_to_job(Config& cfg, int world_size) {
  ParallelConfig& p = cfg.parallel;
  const char* keys[] = {"parallel.dp_replicate", "parallel.dp_shard", "parallel.tp"};
  for (const char* k : keys)
    if (cfg.command_line_keys.count(k)) return;  // chosen for this job: errors name them
  const long known = static_cast<long>(p.dp_replicate > 0 ? p.dp_replicate : 1) * (p.dp_shard > 0 ? p.dp_shard : 1) *
                     (p.tp > 0 ? p.tp : 1);
  const bool all_known = p.dp_replicate > 0 && p.dp_shard > 0 && p.tp > 0;
  const bool fits = all_known ? known == world_size : world_size % known == 0;
  if (fits) return;
  // A saved run's config.ini holds that run's mesh; the weights load onto any mesh, so
  // eval/generate fall back to plain FSDP over this job's ranks instead of failing.
  log::info("the configured mesh (parallel.dp_replicate=%d, parallel.dp_shard=%d, parallel.tp=%d) does not fit the %d "
            "rank(s) of this job; using dp_shard=%d, tp=1 (any mesh loads any checkpoint; give --parallel.tp to choose)",
            p.dp_replicate, p.dp_shard, p.tp, world_size, world_size);
  p.dp_replicate = 1;
  p.dp_shard = -1;
  p.tp = 1;
  if (p.strategy == StrategyChoice::HybridShard) p.strategy = StrategyChoice::Auto;
}

template <class T>
LoadedWeights load_checkpoint_weights(train::Session<T>& session, const plan::RunSetup& setup,
                                      const WeightsSource& source) {
  const bool pretrained = source.pretrained;
  const std::string& resolved = source.path;
  parallel::FsdpEngine<T>& eng = session.engine();
  // No init_parameters: a load writes every value (pretrained sources initialise only
  // what they lack, e.g. LoRA adapters), so no time goes into random weights.
  checkpoint::IoStats io;
  LoadedWeights out;
  if (pretrained) {
    checkpoint::load_weights(eng, session.mesh(), setup.spec.dims, resolved, setup.spec.train.seed, &io);
    out.path = io.path;
  } else {
    // The full loader validates the stored model description against the config (naming
    // every differing key) before it reads anything; a forward-only engine reads no moments.
    const checkpoint::TrainState st = checkpoint::load(eng, session.mesh(), train::checkpoint_meta(setup), resolved, &io);
    out.path = resolved;
    out.step = st.step;
  }
  out.load_seconds = io.seconds;
  return out;
}

template LoadedWeights load_checkpoint_weights<float>(train::Session<float>&, const plan::RunSetup&,
                                                      const WeightsSource&);
template LoadedWeights load_checkpoint_weights<bf16>(train::Session<bf16>&, const plan::RunSetup&,
                                                     const WeightsSource&);

}  // namespace meshtrain::app
