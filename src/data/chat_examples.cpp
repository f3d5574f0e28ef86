// Instruction and chat examples: one JSONL line -> template segments -> ids + loss mask.
#include "data/chat_examples.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "formats/json.hpp"

namespace meshtrain::data {
namespace {

using nlohmann::json;

std::string string_field(const json& obj, const char* key, const std::string& where, bool required) {
  const auto it = obj.find(key);
  if (it == obj.end() || (!required && it->is_null())) {
    MESHTRAIN_REQUIRE(!required, "%s has no \"%s\" field", where.c_str(), key);
    return "";
  }
  MESHTRAIN_REQUIRE(it->is_string(), "%s: \"%s\" must be a string, not %s", where.c_str(), key, it->type_name());
  return it->get<std::string>();
}

std::vector<ChatMessage> chat_messages(const json& root) {
  const auto it = root.find("messages");
  MESHTRAIN_REQUIRE(it != root.end(), "the record has no \"messages\" field (chat records are "
                    "{\"messages\": [{\"role\": ..., \"content\": ...}, ...]})");
  MESHTRAIN_REQUIRE(it->is_array() && !it->empty(), "\"messages\" must be a non-empty list, not %s",
                    it->is_array() ? "an empty list" : it->type_name());
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = strprintf("message %zu", i);
    MESHTRAIN_REQUIRE(m.is_object(), "%s must be an object with \"role\" and \"content\", not %s", where.c_str(),
                      m.type_name());
    ChatMessage msg{string_field(m, "role", where, true), string_field(m, "content", where, true)};
    MESHTRAIN_REQUIRE(msg.role == "system" || msg.role == "user" || msg.role == "assistant",
                      "%s has role '%s'; roles are system, user and assistant", where.c_str(), msg.role.c_str());
    out.push_back(std::move(msg));
  }
  return out;
}

json parse_record(const std::string& line) {
  json root;
  try {
    // Strict (formats::parse_json): a key given twice ({"output": "a", "output": "b"}) would
    // otherwise train silently on the last value.
    root = json(formats::parse_json(line));
  } catch (const std::runtime_error& e) {
    throw UserError(std::string("not valid JSON: ") + e.what());
  }
  MESHTRAIN_REQUIRE(root.is_object(), "a record must be a JSON object, not %s", root.type_name());
  return root;
}

// A preference record's "chosen" or "rejected": a string, an assistant message, or a list of
// exactly one assistant message; its content must hold more than white space (an empty
// response has no token to compare but the end-of-turn marker).
std::string response_field(const json& root, const char* key) {
  const auto it = root.find(key);
  MESHTRAIN_REQUIRE(it != root.end(), "the record has no \"%s\" field (preference records are {\"prompt\": ... or "
                    "\"messages\": [...], \"chosen\": ..., \"rejected\": ...})",
                    key);
  std::string content;
  if (it->is_string()) {
    content = it->get<std::string>();
  } else {
    const json* m = &*it;
    if (it->is_array()) {
      MESHTRAIN_REQUIRE(it->size() == 1, "\"%s\" is a list of %zu messages; it must hold exactly one assistant "
                        "message (the response)",
                        key, it->size());
      m = &(*it)[0];
    }
    MESHTRAIN_REQUIRE(m->is_object(), "\"%s\" must be a string, an assistant message or a list of one, not %s", key,
                      m->type_name());
    const std::string where = strprintf("\"%s\"", key);
    const std::string role = string_field(*m, "role", where, true);
    MESHTRAIN_REQUIRE(role == "assistant", "%s has role '%s'; a response must be the assistant's", where.c_str(),
                      role.c_str());
    content = string_field(*m, "content", where, true);
  }
  MESHTRAIN_REQUIRE(content.find_first_not_of(" \t\r\n\f\v") != std::string::npos,
                    "\"%s\" is an empty response (nothing but white space)", key);
  return content;
}

// Keeps only the last trainable segment (the final response's) trainable: every template
// renders one trainable segment per assistant message, in order.
std::vector<ChatSegment> final_response_only(std::vector<ChatSegment> segs) {
  std::size_t last = segs.size();
  for (std::size_t i = 0; i < segs.size(); ++i)
    if (segs[i].trainable) last = i;
  for (std::size_t i = 0; i < segs.size(); ++i) segs[i].trainable = i == last;
  return segs;
}

}  // namespace

PreferenceSegments render_preference(const std::string& line, const ChatFormat& chat_format, const std::string& system) {
  const json root = parse_record(line);
  // The responses first: a chat or Alpaca record given as preference data lacks them, which
  // says more than what its prompt lacks.
  const std::string chosen = response_field(root, "chosen"), rejected = response_field(root, "rejected");
  const bool has_prompt = root.contains("prompt"), has_messages = root.contains("messages");
  MESHTRAIN_REQUIRE(has_prompt != has_messages,
                    "%s; a preference record gives its prompt as \"prompt\" (text) or as \"messages\" (a "
                    "conversation ending with the user's message)",
                    has_prompt ? "the record has both \"prompt\" and \"messages\"" : "the record has no \"prompt\" "
                                                                                      "and no \"messages\" field");
  std::vector<ChatMessage> prompt;
  if (has_prompt) {
    const std::string text = string_field(root, "prompt", "the record", true);
    prompt.push_back({"user", text});
  } else {
    prompt = chat_messages(root);
    MESHTRAIN_REQUIRE(prompt.back().role == "user",
                      "the last of \"messages\" has role '%s'; the prompt of a preference record ends with the "
                      "user's message (the responses are \"chosen\" and \"rejected\")",
                      prompt.back().role.c_str());
  }
  if (!system.empty() && prompt.front().role != "system") prompt.insert(prompt.begin(), {"system", system});
  MESHTRAIN_REQUIRE(chosen != rejected, "\"chosen\" and \"rejected\" are the same response: the pair prefers "
                    "nothing");
  PreferenceSegments out;
  for (auto [response, segs] : {std::pair{&chosen, &out.chosen}, std::pair{&rejected, &out.rejected}}) {
    std::vector<ChatMessage> messages = prompt;
    messages.push_back({"assistant", *response});
    *segs = final_response_only(render_chat(chat_format, messages));
  }
  return out;
}

std::string default_system_message(const ChatFormat& chat_format, const std::string& system) {
  // render_chat writes the format's default system turn only when no system message is given.
  return !system.empty() ? system : chat_format.default_system;
}

std::vector<ChatSegment> render_example(const std::string& line, ExampleFormat format, const ChatFormat& chat_format,
                                        const std::string& system) {
  const json root = parse_record(line);
  std::vector<ChatMessage> messages;
  if (format == ExampleFormat::Alpaca) {
    const std::string instruction = string_field(root, "instruction", "the record", true);
    const std::string input = string_field(root, "input", "the record", false);
    const std::string output = string_field(root, "output", "the record", true);
    if (chat_format.kind == ChatTemplateKind::Alpaca) return render_alpaca(instruction, input, output, system);
    if (!system.empty()) messages.push_back({"system", system});
    messages.push_back({"user", input.empty() ? instruction : instruction + "\n\n" + input});
    messages.push_back({"assistant", output});
  } else {
    messages = chat_messages(root);
    if (!system.empty() && messages.front().role != "system") messages.insert(messages.begin(), {"system", system});
  }
  return render_chat(chat_format, messages);
}

void require_end_of_turn_token(const Tokenizer& tok, const ChatFormat& format, const std::string& template_name) {
  const std::string marker = end_of_turn_marker(format);
  if (marker.empty() || tok.kind() == "byte") return;
  const std::vector<std::int32_t> ids = tok.encode(marker);
  if (ids.size() == 1) return;
  throw UserError(strprintf(
      "the %s chat template ends each assistant turn with '%s', which the tokenizer %s encodes as %zu ids, not one "
      "token: a model trained on that would learn the marker as plain text and never emit an end-of-turn token. "
      "Choose a --chat_template whose end-of-turn marker is a token of this vocabulary, or a tokenizer that has "
      "'%s' as a (special) token",
      template_name.c_str(), marker.c_str(), tok.name().c_str(), ids.size(), marker.c_str()));
}

MaskedTokens tokenize_with_mask(const Tokenizer& tok, const std::vector<ChatSegment>& segments) {
  std::string text;
  std::vector<std::uint8_t> byte_trainable;  // one flag per byte of `text`
  for (const ChatSegment& s : segments) {
    text += s.text;
    byte_trainable.insert(byte_trainable.end(), s.text.size(), s.trainable ? 1 : 0);
  }
  const std::vector<std::int32_t> ids = tok.encode(text);
  // ends[k]: the byte just past token k in the decoded text, found in one pass (placing the
  // mask by decoding growing prefixes was quadratic: minutes for one long example).
  std::string decoded;
  std::vector<std::size_t> ends;
  const bool spans = tok.decode_with_ends(ids, decoded, ends);
  MESHTRAIN_REQUIRE(decoded == text,
                    "the tokenizer %s does not decode an example back to its text (it normalises the text), so "
                    "the loss mask cannot be placed on its tokens",
                    tok.name().c_str());
  MESHTRAIN_REQUIRE(spans, "the tokenizer %s does not decode an example's tokens in order to its text, so the loss "
                    "mask cannot be placed on its tokens",
                    tok.name().c_str());
  MaskedTokens out;
  if (tok.add_bos() && tok.bos_id() >= 0 && (ids.empty() || ids.front() != tok.bos_id())) {
    out.ids.push_back(tok.bos_id());
    out.mask.push_back(0);
  }
  std::size_t begin = 0;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    // A token is trained on when any byte of its text is; one that adds no text of its own
    // (the leading bytes of a byte-fallback character) goes with the byte it starts.
    std::uint8_t m = ends[k] == begin && begin < text.size() ? byte_trainable[begin] : 0;
    for (std::size_t b = begin; b < ends[k] && !m; ++b) m = byte_trainable[b];
    out.ids.push_back(ids[k]);
    out.mask.push_back(m);
    begin = ends[k];
  }
  return out;
}

}  // namespace meshtrain::data
