// A pretrained-weights source's model settings (checkpoint::source_model_keys) applied to
// the configuration's model.* keys.
#include "app/source_model_config.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "checkpoint/source_model.hpp"
#include "config/config.hpp"
#include "core/checked_int.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "model/model_dims.hpp"

namespace meshtrain::app {
namespace {

/// True when a and b are the same setting: equal text, or equal numbers ("1e-05" = "0.00001").
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char* ea = nullptr;
  char* eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  return !a.empty() && !b.empty() && *ea == '\0' && *eb == '\0' && x == y;
}

// A source's integer setting: every one goes through parse_checked_int, so a value that an
// int cannot hold (n_layer = 2^32 + 2) is refused naming the file instead of wrapping to 2.
long long to_int(const std::string& key, const std::string& v, const std::string& path) {
  return parse_checked_int(v, path, key);
}
int to_int32(const std::string& key, const std::string& v, const std::string& path) {
  return static_cast<int>(parse_checked_int(v, path, key, std::numeric_limits<int>::min(),
                                            std::numeric_limits<int>::max()));
}

void set_model_key(ModelConfig& m, const std::string& key, const std::string& v, const std::string& path) {
  if (key == "model.family") m.family = model::parse_family(v);
  else if (key == "model.vocab_size") m.vocab_size = to_int(key, v, path);
  else if (key == "model.d_model") m.d_model = to_int32(key, v, path);
  else if (key == "model.n_layers") m.n_layers = to_int32(key, v, path);
  else if (key == "model.n_heads") m.n_heads = to_int32(key, v, path);
  else if (key == "model.n_kv_heads") m.n_kv_heads = to_int32(key, v, path);
  else if (key == "model.ffn_dim") m.ffn_dim = to_int32(key, v, path);
  else if (key == "model.max_seq_len") m.max_seq_len = to_int32(key, v, path);
  else if (key == "model.tie_embeddings") m.tie_embeddings = v == "true";
  else if (key == "model.norm_eps") m.norm_eps = std::strtod(v.c_str(), nullptr);
  else if (key == "model.rope_theta") m.rope_theta = std::strtod(v.c_str(), nullptr);
  else throw std::logic_error("set_model_key: unknown key " + key);
}

}  // namespace

namespace {

/// Writes `keys` (a source's model.* settings) into config.model; a key the user gave that
/// differs is a UserError naming `option` and `path`.
void apply_model_keys(Config& config, const std::vector<std::pair<std::string, std::string>>& keys,
                      const std::string& path, const std::string& option) {
  if (keys.empty()) return;
  const std::vector<std::pair<std::string, std::string>> current = config_entries(config);
  auto current_value = [&](const std::string& key) {
    for (const auto& [k, v] : current)
      if (k == key) return v;
    return std::string();
  };
  for (const auto& [key, value] : keys) {
    if (key == "model.padded_vocab_size") {
      // Not a key of its own: model.vocab_pad_multiple must reproduce the stored padding. A
      // multiple the user gave is kept (the loader names a padded size that then differs).
      const long long n = to_int(key, value, path), v = config.model.vocab_size;
      auto padded = [&](long long m) { return (v + m - 1) / m * m; };
      if (padded(config.model.vocab_pad_multiple) == n || config.is_set("model.vocab_pad_multiple")) continue;
      for (long long m = 1; m <= (1 << 16); ++m)
        if (padded(m) == n) {
          config.model.vocab_pad_multiple = static_cast<int>(m);
          break;
        }
      continue;
    }
    // -1 for n_kv_heads / ffn_dim means "the default rule" (a run's config.ini writes it):
    // it asks for nothing the source could contradict.
    const bool automatic = (key == "model.n_kv_heads" || key == "model.ffn_dim") && current_value(key) == "-1";
    if (config.is_set(key) && !automatic)
      MESHTRAIN_REQUIRE(same_value(current_value(key), value),
                        "%s = %s is given, but %s=%s describes a model with %s = %s; drop the setting (the model's "
                        "shape comes from the weights) or load other weights",
                        key.c_str(), current_value(key).c_str(), option.c_str(), path.c_str(), key.c_str(),
                        value.c_str());
    set_model_key(config.model, key, value, path);
  }
}

}  // namespace

void adopt_source_model(Config& config, const std::string& path, const std::string& option) {
  apply_model_keys(config, checkpoint::source_model_keys(path), path, option);
}

void adopt_checkpoint_model(Config& config, const std::string& path, const std::string& option) {
  apply_model_keys(config, checkpoint::checkpoint_model_keys(path), path, option);
}

}  // namespace meshtrain::app
