// Chat templates: recognition by marker tokens and rendering that mirrors each model
// family's Jinja template (SmolLM2 / Qwen ChatML, Meta Llama 3 and Llama 2, Stanford Alpaca).
#include "data/chat_template.hpp"

#include <algorithm>
#include <cstdint>

#include "core/error.hpp"
#include "core/utf8.hpp"

namespace meshtrain::data {
namespace {

/// Python's str.isspace(), which Jinja's `| trim` and `.strip()` use: ASCII blanks and the
/// separators U+001C..U+001F, and Unicode's other white space (U+00A0, U+3000 ideographic
/// space in CJK text, U+2028 ...).
bool python_space(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

/// `s` without leading and trailing white space, as Python's str.strip() (the Llama
/// templates strip each message's content).
std::string strip(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e) {
    const std::size_t len = std::min(utf8::char_len(static_cast<unsigned char>(s[b])), e - b);
    if (!python_space(utf8::decode_at(s, b, len))) break;
    b += len;
  }
  while (e > b) {
    std::size_t start = e - 1;  // back to the first byte of the last character
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    const std::size_t len = std::min(utf8::char_len(static_cast<unsigned char>(s[start])), e - start);
    if (start + len != e || !python_space(utf8::decode_at(s, start, len))) break;
    e = start;
  }
  return s.substr(b, e - b);
}

// Stanford Alpaca's preambles, without and with an input block.
constexpr const char* kAlpacaPreamble =
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.";
constexpr const char* kAlpacaInputPreamble =
    "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
    "response that appropriately completes the request.";

std::string names() {
  std::string out;
  for (const auto& n : known_chat_templates()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void check_roles(const std::vector<ChatMessage>& messages) {
  bool assistant = false;
  for (const auto& m : messages) {
    MESHTRAIN_REQUIRE(m.role == "system" || m.role == "user" || m.role == "assistant",
                      "a chat message has role '%s'; roles are system, user and assistant", m.role.c_str());
    assistant = assistant || m.role == "assistant";
  }
  MESHTRAIN_REQUIRE(assistant, "a conversation has no assistant message: there is nothing to train on");
}

/// A template with a family's markers that renders otherwise than meshtrain renders that
/// family: refused by name (trained on one form, the model would be prompted with another by
/// Hugging Face's apply_chat_template), with the way to take meshtrain's form anyway.
[[noreturn]] void refuse_variant(const std::string& source, const char* variant, const char* name) {
  throw UserError(strprintf("%s: the model's chat template is %s, which meshtrain does not render; meshtrain renders "
                            "the %s form: give --chat_template %s to train (or chat) in that form anyway",
                            source.c_str(), variant, name, name));
}

/// The default system turn a ChatML template writes literally when a conversation has none:
/// the text of the first '<|im_start|>system' + newline + TEXT + '<|im_end|>' whose TEXT is
/// plain (no Jinja expression, quote or concatenation) and that is not under an
/// `{% if tools %}`. Templates that branch (Qwen2.5: a tools branch and a system-message
/// branch come first) hold other system turns before it. The newline is a real one (SmolLM2's GGUF) or Jinja's escape \n (a
/// tokenizer_config.json that writes "\\n"), decoded in TEXT too. "" when there is none.
std::string default_system_turn(const std::string& jinja) {
  const std::string open = "<|im_start|>system";
  for (std::size_t b = jinja.find(open); b != std::string::npos; b = jinja.find(open, b + 1)) {
    std::size_t start = b + open.size();
    if (jinja.compare(start, 1, "\n") == 0) start += 1;
    else if (jinja.compare(start, 2, "\\n") == 0) start += 2;
    else continue;
    const std::size_t e = jinja.find("<|im_end|>", start);
    if (e == std::string::npos) return "";
    const std::string raw = jinja.substr(start, e - start);
    if (raw.find_first_of("{}'\"+") != std::string::npos) continue;
    // A literal system turn under `{% if tools %}` is a tool-use prompt, not the default.
    const std::size_t tag = jinja.rfind("{%", b);
    if (tag != std::string::npos && jinja.substr(tag, jinja.find("%}", tag) - tag).find("tools") != std::string::npos)
      continue;
    std::string text;
    bool plain = true;
    for (std::size_t i = 0; i < raw.size() && plain; ++i) {
      if (raw[i] != '\\') text += raw[i];
      else if (i + 1 < raw.size() && raw[i + 1] == 'n') text += '\n', ++i;
      else plain = false;  // another escape: not a text this reader decodes
    }
    if (plain) return text;
  }
  return "";
}

/// `s` as a Jinja string literal in single quotes. jinja2 reads a literal's backslash escapes
/// as Python's (unicode-escape, after turning its raw line breaks into the environment's
/// newline), so the quote, the backslash and line breaks are escaped and every other
/// character, UTF-8 included, is written as it is.
std::string jinja_string_literal(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\'': out += "\\'"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  return out + "'";
}

/// The prelude of chat_template_jinja's template with a default system message: a
/// conversation that does not start with a system message is rendered with `system` in front.
/// ChatML's writes the system turn itself, literally, the form default_system_turn reads back
/// (when the text is plain: no quote, brace, '+' or backslash).
std::string default_system_prelude(ChatTemplateKind kind, const std::string& system) {
  if (system.empty()) return "";
  const std::string none = "{%- if not messages or messages[0]['role'] != 'system' %}\n";
  if (kind == ChatTemplateKind::ChatML)
    return none + "{{- " + jinja_string_literal("<|im_start|>system\n" + system + "<|im_end|>\n") + " }}\n{%- endif %}\n";
  return none + "{%- set messages = [{'role': 'system', 'content': " + jinja_string_literal(system) +
         "}] + messages %}\n{%- endif %}\n";
}

}  // namespace

std::vector<std::string> known_chat_templates() { return {"alpaca", "chatml", "llama2", "llama3"}; }

std::string chat_template_name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::ChatML: return "chatml";
    case ChatTemplateKind::Llama3: return "llama3";
    case ChatTemplateKind::Llama2: return "llama2";
    case ChatTemplateKind::Alpaca: return "alpaca";
  }
  return "";
}

std::string end_of_turn_marker(const ChatFormat& f) {
  switch (f.kind) {
    case ChatTemplateKind::ChatML: return "<|im_end|>";
    case ChatTemplateKind::Llama3: return "<|eot_id|>";
    case ChatTemplateKind::Llama2: return "</s>";
    case ChatTemplateKind::Alpaca: return "";
  }
  return "";
}

namespace {

/// chat_template_jinja's template without a default system message.
std::string conversation_jinja(ChatTemplateKind kind) {
  // Each mirrors its case of render_chat below, literal markers included (render_chat writes
  // "<|begin_of_text|>" and "<s>" as text too); '{%-' and '{{-' keep the template's own line
  // breaks out of the output. test_data_chat_template (JinjaRendersAsTraining) pins
  // render_chat to jinja2's renderings of these (a change to render_chat must change them).
  switch (kind) {
    case ChatTemplateKind::ChatML:
      return "{%- for message in messages %}\n"
             "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}\n"
             "{%- endfor %}\n"
             "{%- if add_generation_prompt %}\n"
             "{{- '<|im_start|>assistant\\n' }}\n"
             "{%- endif %}\n";
    case ChatTemplateKind::Llama3:
      return "{{- '<|begin_of_text|>' }}\n"
             "{%- for message in messages %}\n"
             "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
             "'<|eot_id|>' }}\n"
             "{%- endfor %}\n"
             "{%- if add_generation_prompt %}\n"
             "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
             "{%- endif %}\n";
    case ChatTemplateKind::Llama2:
      return "{%- if messages[0]['role'] == 'system' %}\n"
             "{%- set system = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}\n"
             "{%- set turns = messages[1:] %}\n"
             "{%- else %}\n"
             "{%- set system = '' %}\n"
             "{%- set turns = messages %}\n"
             "{%- endif %}\n"
             "{%- for message in turns %}\n"
             "{%- if loop.index0 % 2 == 0 %}\n"
             "{{- '<s>[INST] ' + ((system if loop.first else '') + message['content']) | trim + ' [/INST]' }}\n"
             "{%- else %}\n"
             "{{- ' ' + message['content'] | trim + ' </s>' }}\n"
             "{%- endif %}\n"
             "{%- endfor %}\n";  // the reply's leading space is its own (chat_prompt.hpp, reply_lead)
    case ChatTemplateKind::Alpaca:
      // A leading system message in the preamble's place; the blank line after a response
      // only when more follows (the last response ends at the end of text).
      return "{%- if messages[0]['role'] == 'system' %}\n"
             "{%- set preamble = messages[0]['content'] %}\n"
             "{%- set turns = messages[1:] %}\n"
             "{%- else %}\n"
             "{%- set preamble = '" + std::string(kAlpacaPreamble) + "' %}\n"
             "{%- set turns = messages %}\n"
             "{%- endif %}\n"
             "{{- preamble + '\\n\\n' }}\n"
             "{%- for message in turns %}\n"
             "{%- if message['role'] == 'user' %}\n"
             "{{- '### Instruction:\\n' + message['content'] + '\\n\\n### Response:\\n' }}\n"
             "{%- elif message['role'] == 'assistant' %}\n"
             "{{- message['content'] }}\n"
             "{%- if not loop.last %}{{- '\\n\\n' }}{%- endif %}\n"
             "{%- else %}\n"
             "{{- message['content'] + '\\n\\n' }}\n"
             "{%- endif %}\n"
             "{%- endfor %}\n";
  }
  return "";
}

}  // namespace

std::string chat_template_jinja(ChatTemplateKind kind, const std::string& default_system) {
  return default_system_prelude(kind, default_system) + conversation_jinja(kind);
}

ChatFormat chat_format_by_name(const std::string& name) {
  if (name == "chatml") return {ChatTemplateKind::ChatML, ""};
  if (name == "llama3") return {ChatTemplateKind::Llama3, ""};
  if (name == "llama2") return {ChatTemplateKind::Llama2, ""};
  if (name == "alpaca") return {ChatTemplateKind::Alpaca, ""};
  throw UserError(strprintf("unknown chat template '%s'; known: %s", name.c_str(), names().c_str()));
}

ChatFormat recognise_chat_template(const std::string& jinja, const std::string& source) {
  const auto has = [&](const char* marker) { return jinja.find(marker) != std::string::npos; };
  if (has("<|im_start|>") && has("<|im_end|>")) {
    // Qwen3 (and other reasoning models) wrap the final assistant turn in <think>...</think>.
    if (has("<think>"))
      refuse_variant(source, "ChatML with reasoning blocks (<think>...</think> around assistant turns, as Qwen3's)",
                     "chatml");
    return {ChatTemplateKind::ChatML, default_system_turn(jinja)};
  }
  if (has("<|start_header_id|>")) {
    // Llama 3.1 and later open every conversation with a system turn holding a date (today's,
    // in transformers, for 3.2): meshtrain renders Llama 3.0's form, which has none.
    if (has("Cutting Knowledge Date"))
      refuse_variant(source, "Llama 3.1's or later (a system turn with 'Cutting Knowledge Date' and 'Today Date')",
                     "llama3");
    return {ChatTemplateKind::Llama3, ""};
  }
  if (has("[INST]")) {
    // Llama 2 puts the system message in <<SYS>> tags and spaces around each reply; Mistral's
    // [INST] templates do neither.
    if (!has("<<SYS>>"))
      refuse_variant(source, "an [INST] template without Llama 2's <<SYS>> block (Mistral's form)", "llama2");
    return {ChatTemplateKind::Llama2, ""};
  }
  if (has("### Instruction:")) return {ChatTemplateKind::Alpaca, ""};
  throw UserError(strprintf("%s: %s; choose one of the known formats (%s) with --chat_template NAME",
                            source.c_str(),
                            jinja.empty() ? "the model has no chat template" : "the model's chat template is not one meshtrain knows",
                            names().c_str()));
}

std::vector<ChatSegment> render_chat(const ChatFormat& f, const std::vector<ChatMessage>& messages) {
  check_roles(messages);
  std::vector<ChatSegment> out;
  auto plain = [&](const std::string& t) { out.push_back({t, false}); };
  auto train = [&](const std::string& t) { out.push_back({t, true}); };
  switch (f.kind) {
    case ChatTemplateKind::ChatML:
      if (!f.default_system.empty() && messages.front().role != "system")
        plain("<|im_start|>system\n" + f.default_system + "<|im_end|>\n");
      for (const auto& m : messages) {
        plain("<|im_start|>" + m.role + "\n");
        if (m.role == "assistant") {
          train(m.content + "<|im_end|>");
          plain("\n");
        } else {
          plain(m.content + "<|im_end|>\n");
        }
      }
      break;
    case ChatTemplateKind::Llama3:
      // Meta's template: bos, then per message a header and the stripped content + <|eot_id|>.
      plain("<|begin_of_text|>");
      for (const auto& m : messages) {
        plain("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
        if (m.role == "assistant") train(strip(m.content) + "<|eot_id|>");
        else plain(strip(m.content) + "<|eot_id|>");
      }
      break;
    case ChatTemplateKind::Llama2: {
      // Meta's template: the system message goes inside the first [INST]; user and assistant
      // alternate, each user turn opening with <s>, each assistant turn closing with </s>.
      std::size_t k = 0;
      std::string system;
      if (messages[0].role == "system") {
        system = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n";
        k = 1;
      }
      for (std::size_t i = k; i < messages.size(); ++i) {
        const bool user_turn = (i - k) % 2 == 0;
        MESHTRAIN_REQUIRE(messages[i].role == (user_turn ? "user" : "assistant"),
                          "the llama2 chat template needs user and assistant messages alternating after an optional "
                          "system message; message %zu has role '%s'",
                          i, messages[i].role.c_str());
        if (user_turn) {
          plain("<s>[INST] " + strip((i == k ? system : std::string()) + messages[i].content) + " [/INST]");
        } else {
          plain(" ");
          train(strip(messages[i].content) + " </s>");
        }
      }
      break;
    }
    case ChatTemplateKind::Alpaca: {
      // Alpaca has no roles: the preamble (a leading system message takes its place), then
      // user turns as instructions and assistant turns as responses; the blank line between
      // a response and the next instruction belongs to the next prompt, so that a response
      // is followed directly by what ends it (the end of text), as in render_alpaca.
      std::size_t first = 0;
      std::string pending = kAlpacaPreamble;
      if (messages.front().role == "system") pending = messages[first++].content;
      pending += "\n\n";
      for (std::size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
          plain(pending + "### Instruction:\n" + m.content + "\n\n### Response:\n");
          pending.clear();
        } else if (m.role == "assistant") {
          train(m.content);
          pending = "\n\n";
        } else {
          pending += m.content + "\n\n";
        }
      }
      break;
    }
  }
  return out;
}

std::vector<ChatSegment> render_alpaca(const std::string& instruction, const std::string& input,
                                       const std::string& output, const std::string& system) {
  const std::string preamble = !system.empty() ? system : input.empty() ? kAlpacaPreamble : kAlpacaInputPreamble;
  std::string prompt = preamble + "\n\n### Instruction:\n" + instruction;
  if (!input.empty()) prompt += "\n\n### Input:\n" + input;
  prompt += "\n\n### Response:\n";
  return {{prompt, false}, {output, true}};
}

}  // namespace meshtrain::data
