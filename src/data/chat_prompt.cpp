#include "data/chat_prompt.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "formats/gguf_file.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"

namespace meshtrain::data {

namespace fs = std::filesystem;

ChatPrompt chat_generation_prompt(const ChatFormat& format, const std::string& user_message,
                                  const std::string& system) {
  // Render the conversation with a placeholder reply: the text before the reply's
  // (trainable) segment is the prompt; what follows the placeholder inside that segment is
  // the end-of-turn marker. One renderer for training data and for chat, so the two cannot
  // drift apart.
  const std::string reply = "meshtrain-reply-placeholder";
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  messages.push_back({"user", user_message});
  messages.push_back({"assistant", reply});
  ChatPrompt p;
  for (const ChatSegment& s : render_chat(format, messages)) {
    if (!s.trainable) {
      p.text += s.text;
      continue;
    }
    const std::size_t at = s.text.find(reply);
    MESHTRAIN_ASSERT(at != std::string::npos, "chat template rendered the reply without its content");
    p.text += s.text.substr(0, at);  // e.g. Llama 2 writes nothing before; kept for any that do
    std::string end = s.text.substr(at + reply.size());
    // " </s>" -> "</s>": the marker is matched as a token, the space belongs to the reply.
    const std::size_t b = end.find_first_not_of(" \n");
    p.end_of_turn = b == std::string::npos ? "" : end.substr(b);
    break;
  }
  return p;
}

namespace {

std::string config_chat_template(const fs::path& config) {
  if (!fs::exists(config)) return "";
  const auto j = nlohmann::json::parse(file_io::read_text_file(config.string(), ""), nullptr, false);
  MESHTRAIN_REQUIRE(!j.is_discarded(), "%s is not valid JSON", config.string().c_str());
  if (!j.is_object() || !j.contains("chat_template")) return "";
  const auto& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  // A list of named templates ([{"name": "default", "template": ...}, ...]): the default one.
  if (t.is_array())
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        return e["template"].get<std::string>();
  return "";
}

}  // namespace

std::string chat_template_text(const std::string& spec) {
  std::error_code ec;
  if (spec == "byte" || !fs::exists(spec, ec)) return "";
  if (fs::is_directory(spec, ec)) return config_chat_template(fs::path(spec) / "tokenizer_config.json");
  if (formats::looks_like_gguf(spec))
    return formats::GgufFile(spec).metadata_string("tokenizer.chat_template", "");
  return config_chat_template(fs::path(spec).parent_path() / "tokenizer_config.json");
}

}  // namespace meshtrain::data
