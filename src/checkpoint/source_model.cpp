// Model settings from a pretrained-weights source: Hugging Face config.json (LlamaConfig,
// GPT2Config keys) or GGUF metadata (gguf_import.cpp), applied to config.model.
#include "meshtrain/checkpoint/source_model.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "gguf_import.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/format.hpp"
#include "meshtrain/core/json_parse.hpp"

namespace meshtrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using Keys = std::vector<std::pair<std::string, std::string>>;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// config.json's members, with the typed look-ups a model description needs.
struct HfConfig {
  std::string path;
  json::Value root;

  const json::Value* get(const char* key) const {
    const json::Value* v = root.find(key);
    return v && v->kind != json::Value::Kind::Null ? v : nullptr;
  }
  std::string number(const char* key) const {
    const json::Value* v = get(key);
    MESHTRAIN_REQUIRE(v && v->kind == json::Value::Kind::Number, "%s: \"%s\" is missing or not a number", path.c_str(),
                      key);
    return v->text;
  }
  std::string number_or(const char* key, const std::string& fallback) const {
    return get(key) ? number(key) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    MESHTRAIN_REQUIRE(v->kind == json::Value::Kind::Bool, "%s: \"%s\" is not true or false", path.c_str(), key);
    return v->boolean;
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    MESHTRAIN_REQUIRE(v->kind == json::Value::Kind::String, "%s: \"%s\" is not a string", path.c_str(), key);
    return v->text;
  }
};

HfConfig read_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MESHTRAIN_REQUIRE(in, "cannot read %s", path.c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  HfConfig c{path, {}};
  try {
    c.root = json::parse(ss.str());
  } catch (const std::runtime_error& e) {
    throw UserError(strprintf("%s is not valid JSON: %s", path.c_str(), e.what()));
  }
  MESHTRAIN_REQUIRE(c.root.kind == json::Value::Kind::Object, "%s is not a JSON object", path.c_str());
  return c;
}

/// LlamaConfig (transformers) -> model keys. Defaults are LlamaConfig's.
Keys llama_keys(const HfConfig& c) {
  const std::string heads = c.number("num_attention_heads");
  const long long d = std::atoll(c.number("hidden_size").c_str()), h = std::atoll(heads.c_str());
  MESHTRAIN_REQUIRE(h > 0 && d % h == 0, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld",
                    c.path.c_str(), d, h);
  if (const json::Value* hd = c.get("head_dim"))
    MESHTRAIN_REQUIRE(hd->kind == json::Value::Kind::Number && std::atoll(hd->text.c_str()) == d / h,
                      "%s: head_dim %s differs from hidden_size / num_attention_heads = %lld; meshtrain's Llama "
                      "needs head_dim = d_model / n_heads",
                      c.path.c_str(), hd->text.c_str(), d / h);
  MESHTRAIN_REQUIRE(!c.get("rope_scaling"),
                    "%s sets rope_scaling; meshtrain implements plain RoPE only (no scaled or YaRN variants)",
                    c.path.c_str());
  MESHTRAIN_REQUIRE(!c.boolean_or("attention_bias", false) && !c.boolean_or("mlp_bias", false),
                    "%s: a Llama with attention_bias or mlp_bias; meshtrain's Llama has no biases", c.path.c_str());
  const std::string act = c.string_or("hidden_act", "silu");
  MESHTRAIN_REQUIRE(act == "silu", "%s: hidden_act is '%s'; meshtrain's Llama uses silu (SwiGLU)", c.path.c_str(),
                    act.c_str());
  return {{"model.family", "llama"},
          {"model.vocab_size", c.number("vocab_size")},
          {"model.d_model", c.number("hidden_size")},
          {"model.n_layers", c.number("num_hidden_layers")},
          {"model.n_heads", heads},
          {"model.n_kv_heads", c.number_or("num_key_value_heads", heads)},
          {"model.ffn_dim", c.number("intermediate_size")},
          {"model.tie_embeddings", c.boolean_or("tie_word_embeddings", false) ? "true" : "false"},
          {"model.norm_eps", c.number_or("rms_norm_eps", "1e-6")},
          {"model.rope_theta", c.number_or("rope_theta", "10000")}};
}

/// GPT2Config -> model keys. Defaults are GPT2Config's.
Keys gpt2_keys(const HfConfig& c) {
  const std::string d = c.number_or("n_embd", "768");
  const std::string act = c.string_or("activation_function", "gelu_new");
  MESHTRAIN_REQUIRE(act == "gelu_new" || act == "gelu_pytorch_tanh",
                    "%s: activation_function is '%s'; meshtrain's GPT-2 uses the tanh GELU (gelu_new)", c.path.c_str(),
                    act.c_str());
  const std::string inner = c.get("n_inner") ? c.number("n_inner") : std::to_string(4 * std::atoll(d.c_str()));
  return {{"model.family", "gpt2"},
          {"model.vocab_size", c.number_or("vocab_size", "50257")},
          {"model.d_model", d},
          {"model.n_layers", c.number_or("n_layer", "12")},
          {"model.n_heads", c.number_or("n_head", "12")},
          {"model.ffn_dim", inner},
          {"model.max_seq_len", c.number_or("n_positions", "1024")},
          {"model.tie_embeddings", c.boolean_or("tie_word_embeddings", true) ? "true" : "false"},
          {"model.norm_eps", c.number_or("layer_norm_epsilon", "1e-5")}};
}

/// True when a and b are the same setting: equal text, or equal numbers ("1e-05" = "0.00001").
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char* ea = nullptr;
  char* eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  return !a.empty() && !b.empty() && *ea == '\0' && *eb == '\0' && x == y;
}

long long to_int(const std::string& key, const std::string& v) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (end && *end == '\0') return x;
  const double d = std::strtod(v.c_str(), &end);  // "576.0"
  MESHTRAIN_REQUIRE(end && *end == '\0' && d == std::floor(d), "the source gives %s = '%s', not an integer", key.c_str(),
                    v.c_str());
  return static_cast<long long>(d);
}

void set_model_key(ModelConfig& m, const std::string& key, const std::string& v) {
  if (key == "model.family") m.family = model::parse_family(v);
  else if (key == "model.vocab_size") m.vocab_size = to_int(key, v);
  else if (key == "model.d_model") m.d_model = static_cast<int>(to_int(key, v));
  else if (key == "model.n_layers") m.n_layers = static_cast<int>(to_int(key, v));
  else if (key == "model.n_heads") m.n_heads = static_cast<int>(to_int(key, v));
  else if (key == "model.n_kv_heads") m.n_kv_heads = static_cast<int>(to_int(key, v));
  else if (key == "model.ffn_dim") m.ffn_dim = static_cast<int>(to_int(key, v));
  else if (key == "model.max_seq_len") m.max_seq_len = static_cast<int>(to_int(key, v));
  else if (key == "model.tie_embeddings") m.tie_embeddings = v == "true";
  else if (key == "model.norm_eps") m.norm_eps = std::strtod(v.c_str(), nullptr);
  else if (key == "model.rope_theta") m.rope_theta = std::strtod(v.c_str(), nullptr);
  else throw std::logic_error("set_model_key: unknown key " + key);
}

}  // namespace

Keys source_model_keys(const std::string& path) {
  std::error_code ec;
  if (ends_with(path, ".gguf") && fs::is_regular_file(path, ec)) return gguf_model_keys(path);
  const std::string cfg = path + "/config.json";
  if (!fs::is_directory(path, ec) || !fs::is_regular_file(cfg, ec)) return {};
  const HfConfig c = read_hf_config(cfg);
  const std::string type = c.string_or("model_type", "");
  if (type == "llama") return llama_keys(c);
  if (type == "gpt2") return gpt2_keys(c);
  throw UserError(strprintf("%s: model_type '%s' is not a model meshtrain runs; it runs llama and gpt2 models",
                            cfg.c_str(), type.c_str()));
}

void adopt_source_model(Config& config, const std::string& path, const std::string& option) {
  const Keys keys = source_model_keys(path);
  if (keys.empty()) return;
  const std::vector<std::pair<std::string, std::string>> current = config_entries(config);
  auto current_value = [&](const std::string& key) {
    for (const auto& [k, v] : current)
      if (k == key) return v;
    return std::string();
  };
  for (const auto& [key, value] : keys) {
    // -1 for n_kv_heads / ffn_dim means "the default rule" (a run's config.ini writes it):
    // it asks for nothing the source could contradict.
    const bool automatic = (key == "model.n_kv_heads" || key == "model.ffn_dim") && current_value(key) == "-1";
    if (config.is_set(key) && !automatic)
      MESHTRAIN_REQUIRE(same_value(current_value(key), value),
                        "%s = %s is given, but %s=%s describes a model with %s = %s; drop the setting (the model's "
                        "shape comes from the weights) or load other weights",
                        key.c_str(), current_value(key).c_str(), option.c_str(), path.c_str(), key.c_str(),
                        value.c_str());
    set_model_key(config.model, key, value);
  }
}

}  // namespace meshtrain::checkpoint
