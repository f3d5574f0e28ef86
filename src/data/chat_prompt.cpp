#include "data/chat_prompt.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "formats/gguf_file.hpp"
#include "core/error.hpp"
#include "data/tokenizer_config.hpp"

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
    // Llama 2's template writes the space before a reply with the reply (as Hugging Face's
    // template has no generation prompt for it): the prompt ends at "[/INST]", as HF's does.
    if (format.kind == ChatTemplateKind::Llama2 && !p.text.empty() && p.text.back() == ' ') {
      p.text.pop_back();
      p.reply_lead = " ";
    }
    std::string end = s.text.substr(at + reply.size());
    // " </s>" -> "</s>": the marker is matched as a token, the space belongs to the reply.
    const std::size_t b = end.find_first_not_of(" \n");
    p.end_of_turn = b == std::string::npos ? "" : end.substr(b);
    break;
  }
  return p;
}

std::string chat_template_text(const std::string& spec) {
  std::error_code ec;
  if (spec == "byte" || !fs::exists(spec, ec)) return "";
  if (!fs::is_directory(spec, ec) && formats::looks_like_gguf(spec))
    return formats::GgufFile(spec).metadata_string("tokenizer.chat_template", "");
  return read_tokenizer_config(tokenizer_config_of(spec)).chat_template;
}

}  // namespace meshtrain::data
