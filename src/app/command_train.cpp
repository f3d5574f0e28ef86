#include <cstdio>

#include "command_options.hpp"
#include "app/commands.hpp"
#include "app/run_spec_resolve.hpp"
#include "app/source_model_config.hpp"
#include "config/config.hpp"
#include "plan/run_setup.hpp"
#include "train/stop_policy.hpp"
#include "train/trainer.hpp"

namespace meshtrain::app {

int command_train(Runtime& rt, const Args& args) {
  // Before anything that takes time (resolving a resume, the dataset checks, the checkpoint
  // load, the GEMM measurement): a preemption signal during start-up must set the stop flag
  // (status 75, the job is requeued), not kill the rank by the default action. Only `train`
  // installs them: eval and generate have nothing to save and end on the signal as usual.
  train::install_stop_signal_handlers();
  ParsedArgs parsed = parse_config("train", args);
  if (answer_help(rt, parsed)) return 0;
  Config& cfg = parsed.config;
  // Pretrained weights from a Hugging Face directory or GGUF file bring their model's shape.
  if (!cfg.checkpoint.init_from.empty())
    adopt_source_model(cfg, cfg.checkpoint.init_from, "checkpoint.init_from");
  configure_run_logging(rt, cfg);
  const plan::RunSetup setup = resolve_training_run(cfg, rt);  // a resume keeps its checkpoint's choices
  return train::run_training(rt, setup);
}

}  // namespace meshtrain::app
