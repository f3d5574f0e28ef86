// Model settings from a pretrained-weights source: Hugging Face config.json (LlamaConfig,
// GPT2Config keys) or GGUF metadata (gguf_import.cpp), as model.* keys (app/ applies them
// to the config: app/source_model_config.cpp).
#include "checkpoint/source_model.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "format.hpp"
#include "gguf_import.hpp"
#include "h5.hpp"
#include "core/checked_int.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"
#include "formats/gguf_file.hpp"
#include "formats/json.hpp"

namespace meshtrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using Keys = std::vector<std::pair<std::string, std::string>>;
/// Above this a vocabulary is no model's: 2^62 keeps vocab * d_model products in 64 bits.
constexpr long long kMaxVocab = 1LL << 62;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// config.json's members, with the typed look-ups a model description needs.
struct HfConfig {
  std::string path;
  formats::Json root;

  const formats::Json* get(const char* key) const {
    const auto it = root.find(key);
    return it != root.end() && !it->is_null() ? &*it : nullptr;
  }
  /// The number's text as meshtrain writes it (the shortest that reads back the same).
  std::string number(const char* key) const {
    const formats::Json* v = get(key);
    MESHTRAIN_REQUIRE(v && v->is_number(), "%s: \"%s\" is missing or not a number", path.c_str(), key);
    return v->dump();
  }
  std::string number_or(const char* key, const std::string& fallback) const {
    return get(key) ? number(key) : fallback;
  }
  /// A shape setting (layers, width, heads, vocabulary): a whole number in 1..INT_MAX
  /// (vocab_size: 1..2^62), checked here where the file's key is known, as its decimal text.
  std::string count(const char* key, long long hi = std::numeric_limits<int>::max()) const {
    return std::to_string(parse_checked_int(number(key), path, key, 1, hi));
  }
  std::string count_or(const char* key, const std::string& fallback,
                       long long hi = std::numeric_limits<int>::max()) const {
    return get(key) ? count(key, hi) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    const formats::Json* v = get(key);
    if (!v) return fallback;
    MESHTRAIN_REQUIRE(v->is_boolean(), "%s: \"%s\" is not true or false", path.c_str(), key);
    return v->get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    const formats::Json* v = get(key);
    if (!v) return fallback;
    MESHTRAIN_REQUIRE(v->is_string(), "%s: \"%s\" is not a string", path.c_str(), key);
    return v->get<std::string>();
  }
};

HfConfig read_hf_config(const std::string& path) {
  const std::string text = file_io::read_text_file(path, "");
  HfConfig c{path, {}};
  try {
    c.root = formats::parse_json(text);
  } catch (const std::runtime_error& e) {
    throw UserError(strprintf("%s is not valid JSON: %s", path.c_str(), e.what()));
  }
  MESHTRAIN_REQUIRE(c.root.is_object(), "%s is not a JSON object", path.c_str());
  return c;
}

/// LlamaConfig (transformers) -> model keys. Defaults are LlamaConfig's.
Keys llama_keys(const HfConfig& c) {
  const std::string heads = c.count("num_attention_heads");
  const long long d = std::atoll(c.count("hidden_size").c_str()), h = std::atoll(heads.c_str());
  MESHTRAIN_REQUIRE(h > 0 && d % h == 0, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld",
                    c.path.c_str(), d, h);
  if (const formats::Json* hd = c.get("head_dim"))
    MESHTRAIN_REQUIRE(hd->is_number() &&
                          parse_checked_int(hd->dump(), c.path, "head_dim", 1, std::numeric_limits<int>::max()) == d / h,
                      "%s: head_dim %s differs from hidden_size / num_attention_heads = %lld; meshtrain's Llama "
                      "needs head_dim = d_model / n_heads",
                      c.path.c_str(), hd->dump().c_str(), d / h);
  MESHTRAIN_REQUIRE(!c.get("rope_scaling"),
                    "%s sets rope_scaling; meshtrain implements plain RoPE only (no scaled or YaRN variants)",
                    c.path.c_str());
  MESHTRAIN_REQUIRE(!c.boolean_or("attention_bias", false) && !c.boolean_or("mlp_bias", false),
                    "%s: a Llama with attention_bias or mlp_bias; meshtrain's Llama has no biases", c.path.c_str());
  const std::string act = c.string_or("hidden_act", "silu");
  MESHTRAIN_REQUIRE(act == "silu", "%s: hidden_act is '%s'; meshtrain's Llama uses silu (SwiGLU)", c.path.c_str(),
                    act.c_str());
  return {{"model.family", "llama"},
          {"model.vocab_size", c.count("vocab_size", kMaxVocab)},
          {"model.d_model", c.count("hidden_size")},
          {"model.n_layers", c.count("num_hidden_layers")},
          {"model.n_heads", heads},
          {"model.n_kv_heads", c.count_or("num_key_value_heads", heads)},
          {"model.ffn_dim", c.count("intermediate_size")},
          {"model.tie_embeddings", c.boolean_or("tie_word_embeddings", false) ? "true" : "false"},
          {"model.norm_eps", c.number_or("rms_norm_eps", "1e-6")},
          {"model.rope_theta", c.number_or("rope_theta", "10000")}};
}

/// GPT2Config -> model keys. Defaults are GPT2Config's.
Keys gpt2_keys(const HfConfig& c) {
  const std::string d = c.count_or("n_embd", "768");
  const std::string act = c.string_or("activation_function", "gelu_new");
  MESHTRAIN_REQUIRE(act == "gelu_new" || act == "gelu_pytorch_tanh",
                    "%s: activation_function is '%s'; meshtrain's GPT-2 uses the tanh GELU (gelu_new)", c.path.c_str(),
                    act.c_str());
  // Two attention variants of transformers' GPT2Attention that meshtrain does not compute:
  // loaded anyway, the model would give other logits than the one trained.
  MESHTRAIN_REQUIRE(c.boolean_or("scale_attn_weights", true),
                    "%s: scale_attn_weights is false (attention scores not divided by sqrt(head_dim)); meshtrain's "
                    "GPT-2 always divides them",
                    c.path.c_str());
  MESHTRAIN_REQUIRE(!c.boolean_or("scale_attn_by_inverse_layer_idx", false),
                    "%s: scale_attn_by_inverse_layer_idx is true (attention scores also divided by the layer's "
                    "number); meshtrain's GPT-2 does not do that",
                    c.path.c_str());
  const std::string inner = c.get("n_inner") ? c.count("n_inner") : std::to_string(4 * std::atoll(d.c_str()));
  return {{"model.family", "gpt2"},
          {"model.vocab_size", c.count_or("vocab_size", "50257", kMaxVocab)},
          {"model.d_model", d},
          {"model.n_layers", c.count_or("n_layer", "12")},
          {"model.n_heads", c.count_or("n_head", "12")},
          {"model.ffn_dim", inner},
          {"model.max_seq_len", c.count_or("n_positions", "1024")},
          {"model.tie_embeddings", c.boolean_or("tie_word_embeddings", true) ? "true" : "false"},
          {"model.norm_eps", c.number_or("layer_norm_epsilon", "1e-5")}};
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

std::int64_t source_context_length(const std::string& path) {
  std::error_code ec;
  if (ends_with(path, ".gguf") && fs::is_regular_file(path, ec)) {
    const formats::GgufFile f(path);
    // GGUF keys are prefixed by the architecture (llama.context_length); gguf_model_keys
    // refuses the others, so a non-llama file says nothing here.
    return f.metadata_string("general.architecture", "") == "llama" ? f.metadata_int("llama.context_length", 0) : 0;
  }
  // A .safetensors file inside a Hugging Face directory: that directory's config.json.
  const fs::path dir = ends_with(path, ".safetensors") ? fs::path(path).parent_path() : fs::path(path);
  const std::string cfg = (dir / "config.json").string();
  if (!fs::is_directory(dir, ec) || !fs::is_regular_file(cfg, ec)) return 0;
  const HfConfig c = read_hf_config(cfg);
  const std::string type = c.string_or("model_type", "");
  const char* key = type == "llama" ? "max_position_embeddings" : type == "gpt2" ? "n_positions" : nullptr;
  return key && c.get(key) ? std::atoll(c.count(key).c_str()) : 0;
}

Keys checkpoint_model_keys(const std::string& path) {
  format::validate(path, {}, {false, nullptr});  // a readable meshtrain checkpoint, or a clear error
  h5::QuietErrors quiet;
  h5::Handle f = format::open_checked(path);
  const model::ModelDims d = format::read_model_dims(f.get(), path);
  const auto real = [](double v) { return strprintf("%.17g", v); };
  return {{"model.family", model::family_name(d.family)},
          {"model.vocab_size", std::to_string(d.valid_vocab)},
          {"model.padded_vocab_size", std::to_string(d.vocab)},
          {"model.d_model", std::to_string(d.d_model)},
          {"model.n_layers", std::to_string(d.n_layers)},
          {"model.n_heads", std::to_string(d.n_heads)},
          {"model.n_kv_heads", std::to_string(d.n_kv_heads)},
          {"model.ffn_dim", std::to_string(d.ffn_dim)},
          {"model.max_seq_len", std::to_string(d.max_seq_len)},
          {"model.tie_embeddings", d.tied ? "true" : "false"},
          {"model.norm_eps", real(d.norm_eps)},
          {"model.rope_theta", real(d.rope_theta)}};
}

}  // namespace meshtrain::checkpoint
