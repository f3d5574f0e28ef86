#include "data/tokenizer_config.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/file_io.hpp"
#include "core/format.hpp"

namespace meshtrain::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// A value as a message shows it: its JSON, cut to 60 characters.
std::string shown(const json& v) {
  std::string d = v.dump();
  return d.size() > 60 ? d.substr(0, 57) + "..." : d;
}

bool absent(const json& cfg, const char* key) { return !cfg.contains(key) || cfg[key].is_null(); }

/// tokenizer_config.json's own keys (read_tokenizer_config's contract, the template inline).
TokenizerConfig read_config_file(const fs::path& file) {
  TokenizerConfig out;
  std::error_code ec;
  if (!fs::exists(file, ec)) return out;
  const std::string where = file.string();
  const json cfg = json::parse(file_io::read_text_file(where, ""), nullptr, false);
  MESHTRAIN_REQUIRE(!cfg.is_discarded(), "%s is not valid JSON", where.c_str());
  MESHTRAIN_REQUIRE(cfg.is_object(), "%s must hold a JSON object, not %s", where.c_str(), cfg.type_name());
  for (auto [key, text] : {std::pair<const char*, std::string*>{"bos_token", &out.bos_token},
                           {"eos_token", &out.eos_token}, {"pad_token", &out.pad_token}}) {
    if (absent(cfg, key)) continue;
    const json& v = cfg[key];
    // transformers writes an AddedToken as {"content": ..., "lstrip": ..., ...}.
    const json* content = v.is_object() && v.contains("content") ? &v["content"] : &v;
    MESHTRAIN_REQUIRE(content->is_string(), "%s: \"%s\" must be a token's text or {\"content\": text}, got %s",
                      where.c_str(), key, shown(v).c_str());
    *text = content->get<std::string>();
  }
  if (!absent(cfg, "add_bos_token")) {
    MESHTRAIN_REQUIRE(cfg["add_bos_token"].is_boolean(), "%s: \"add_bos_token\" must be true or false, got %s",
                      where.c_str(), shown(cfg["add_bos_token"]).c_str());
    out.add_bos_token = cfg["add_bos_token"].get<bool>();
  }
  if (!absent(cfg, "chat_template")) {
    const json& t = cfg["chat_template"];
    if (t.is_string()) {
      out.chat_template = t.get<std::string>();
    } else {
      // A list of named templates ([{"name": "default", "template": ...}, {"name": "tool_use", ...}]):
      // the default one is the chat template (transformers' choice without a name).
      const auto named = [](const json& e) {
        return e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("template") &&
               e["template"].is_string();
      };
      bool ok = t.is_array();
      for (const json& e : t.is_array() ? t : json::array()) ok = ok && named(e);
      MESHTRAIN_REQUIRE(ok, "%s: \"chat_template\" must be a template's text or a list of {\"name\": text, "
                            "\"template\": text}, got %s",
                        where.c_str(), shown(t).c_str());
      for (const json& e : t)
        if (e["name"] == "default") out.chat_template = e["template"].get<std::string>();
    }
  }
  return out;
}

}  // namespace

TokenizerConfig read_tokenizer_config(const fs::path& file) {
  TokenizerConfig out = read_config_file(file);
  // transformers 4.47 and later save the chat template beside the config, in
  // chat_template.jinja, and read that file in preference to the config's "chat_template"
  // (tokenization_utils_base's CHAT_TEMPLATE_FILE): the template used is the one Hugging Face
  // renders with, also where an older copy is left in the config or none is there at all.
  const fs::path sidecar = file.parent_path() / kChatTemplateFile;
  std::error_code ec;
  if (fs::exists(sidecar, ec) || fs::is_symlink(sidecar, ec))
    out.chat_template = file_io::read_text_file(sidecar.string(), "");
  return out;
}

fs::path tokenizer_config_of(const std::string& tokenizer_spec) {
  std::error_code ec;
  const fs::path spec(tokenizer_spec);
  return (fs::is_directory(spec, ec) ? spec : spec.parent_path()) / "tokenizer_config.json";
}

}  // namespace meshtrain::data
