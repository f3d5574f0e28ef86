#pragma once
/// \brief Loading pretrained weights (checkpoint.init_from, eval/generate --checkpoint) takes
/// the model's shape from them: the source's model.* keys (checkpoint::source_model_keys)
/// written into the configuration, so the user does not restate them.

#include <string>

namespace meshtrain {
struct Config;  // the parsed configuration (config module): only app/ and config/ see it
}  // namespace meshtrain

namespace meshtrain::app {

/// Sets config.model from checkpoint::source_model_keys(path). A key the user gave
/// (Config::is_set) whose value differs is a UserError naming the key, both values and
/// `option` (e.g. "checkpoint.init_from"). Not collective: every rank reads the same files
/// and reaches the same verdict.
void adopt_source_model(Config& config, const std::string& path, const std::string& option);

/// The same for a meshtrain checkpoint file (eval/generate --checkpoint): the model its
/// /model group describes (checkpoint::checkpoint_model_keys), so that a checkpoint loads
/// without its run's config. Not collective.
void adopt_checkpoint_model(Config& config, const std::string& path, const std::string& option);

}  // namespace meshtrain::app
