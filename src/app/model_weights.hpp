#pragma once
// The model weights `meshtrain eval` and `meshtrain generate` run: which weights
// --checkpoint names, the model, LoRA settings and tokenizer they bring, a saved mesh fitted
// to this job, and the weights loaded onto this job's mesh.

#include <boost/program_options.hpp>
#include <string>

#include "command_options.hpp"
#include "app/commands.hpp"
#include "checkpoint/tokenizer_ref.hpp"
#include "config/config.hpp"
#include "plan/run_setup.hpp"
#include "train/session.hpp"

namespace meshtrain::app {

/// Help text of the `--checkpoint` option both commands take.
inline constexpr const char* kCheckpointOptionHelp =
    "a step_*.h5 checkpoint, a checkpoint directory (its newest checkpoint), a Hugging Face model "
    "directory / .safetensors file, or a llama .gguf file (a config.json or GGUF metadata sets the model keys); "
    "default: the newest checkpoint in checkpoint.dir (<output.dir>/checkpoints)";

/// Which weights to load: `--checkpoint` as given (a step_*.h5 file, a checkpoint
/// directory, a Hugging Face directory / .safetensors file, or a .gguf file), or empty for the run's
/// newest checkpoint in checkpoint.dir (<output.dir>/checkpoints).
struct LoadedWeights {
  std::string path;  ///< the file that was read
  int step = -1;     ///< training step of a meshtrain checkpoint; -1 for safetensors
  double load_seconds = 0;
};

/// The weights `--checkpoint` names (empty: the newest checkpoint of the config's run),
/// resolved on rank 0 and shared (collective; UserError on every rank alike).
struct WeightsSource {
  std::string path;          ///< a step_*.h5 file, a safetensors file/directory or a GGUF file
  bool pretrained = false;   ///< safetensors or GGUF (not a meshtrain checkpoint)
};
WeightsSource resolve_weights(const MpiComm& world, const Config& cfg, const std::string& checkpoint_option);

/// A meshtrain checkpoint describes its model: the config's model.* keys are set from its
/// /model group (a key the user gave that differs is a UserError naming both), so eval and
/// generate need no run config. Nothing for pretrained sources (adopt_source_model reads
/// those). Collective (errors on every rank alike).
void adopt_checkpoint_model_on_all(const MpiComm& world, Config& cfg, const WeightsSource& source,
                                   const std::string& checkpoint_option);

/// The LoRA settings (rank, alpha, targets) of a meshtrain checkpoint replace the config's:
/// the adapters are part of the model that was trained (a message when they differ; a
/// warning when the user set other values). Collective.
void take_lora_from_checkpoint(const MpiComm& world, Config& cfg, const WeightsSource& source);

/// `eval` without a train.seq_len (neither in a config file nor on the command line): a
/// meshtrain checkpoint's recorded train.seq_len replaces the default, so that the windows
/// are those the run trained on (and a row dataset's rows match). Nothing for pretrained
/// sources, which record none. Collective.
void take_seq_len_from_checkpoint(const MpiComm& world, Config& cfg, const WeightsSource& source);

/// The tokenizer of the model `source` holds (collective): what a meshtrain checkpoint
/// records, a GGUF file's, a Hugging Face directory's; unknown for older checkpoints and
/// sources without one. `name` gets "checkpoint PATH" / "model PATH" for messages. A
/// tokenizer that cannot be read is unknown, with the reason in `*error` (open_model_tokenizer
/// reports it when the tokenizer is needed).
checkpoint::TokenizerRef model_tokenizer_ref(const MpiComm& world, const WeightsSource& source, std::string* name,
                                             std::string* error);

/// The tokenizer to run the model with (not collective: every rank makes its own):
/// `given` (--tokenizer; must be the model's when the model's is known, else UserError
/// naming both), else the model's, else `fallback` with a notice that the model's
/// tokenizer is unknown.
std::unique_ptr<data::Tokenizer> open_model_tokenizer(const checkpoint::TokenizerRef& model, const std::string& model_name,
                                                      const std::string& given, const std::string& fallback,
                                                      const std::string& error = "");

/// A mesh that came from a config file (a saved run's config.ini) and does not fit this
/// job's `world_size` ranks is replaced by plain FSDP over all ranks, with a message;
/// mesh keys given on the command line are kept (their errors name them).
void fit_mesh_to_job(Config& cfg, int world_size);

/// Loads the weights into `session`'s engine (collective), with no random initialisation
/// except for parameters a pretrained source lacks. A meshtrain checkpoint must describe
/// the same model as the config (UserError naming each differing key); safetensors and
/// GGUF tensors are matched by name and shape.
template <class T>
LoadedWeights load_checkpoint_weights(train::Session<T>& session, const plan::RunSetup& setup,
                                      const WeightsSource& source);

/// eval, generate, at log level debug (output.log_level=debug): the mesh and strategy the
/// plan chose and why (ranked by one forward pass: plan::predict_step), and this rank's
/// memory peak since the pool's peaks were reset after the load beside the plan's
/// forward-pass figure (RunSetup::memory_planned): how the plan compares with the run.
void log_forward_plan(const char* command, const plan::RunSetup& setup);

}  // namespace meshtrain::app
