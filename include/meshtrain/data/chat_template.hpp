#pragma once
/// \file
/// \brief Chat templates for instruction and chat data: a model's template (the Jinja text in
/// a GGUF's tokenizer.chat_template, a chat_template.jinja or tokenizer_config.json's
/// chat_template) is recognised as one of the known formats, and a conversation is rendered
/// into text segments that say which text the loss is computed on (the assistant's replies
/// and their end-of-turn token).
///
/// Used by `prepare --format chat|alpaca` (chat_examples.hpp) and `generate --chat`
/// (chat_prompt.hpp).

#include <string>
#include <vector>

namespace meshtrain::data {

enum class ChatTemplateKind { ChatML, Llama3, Llama2, Alpaca };

/// "alpaca", "chatml", "llama2", "llama3".
std::vector<std::string> known_chat_templates();

struct ChatFormat {
  ChatTemplateKind kind = ChatTemplateKind::ChatML;
  /// System message the model's template inserts when a conversation has none (SmolLM2:
  /// "You are a helpful AI assistant named SmolLM, ..."); "" for none.
  std::string default_system;
};

/// The name of a format as known_chat_templates() spells it ("chatml" ...).
std::string chat_template_name(ChatTemplateKind kind);

/// The end-of-turn marker `format` writes after each assistant reply, the one the model
/// learns to emit to stop: "<|im_end|>" (ChatML), "<|eot_id|>" (Llama 3), "</s>" (Llama 2);
/// "" for Alpaca, whose responses end with the tokenizer's end-of-text id (added by prepare).
std::string end_of_turn_marker(const ChatFormat& format);

/// The format named `name` (one of known_chat_templates()); UserError listing them otherwise.
ChatFormat chat_format_by_name(const std::string& name);

/// \brief The format of a model's Jinja template text, recognised by its marker tokens
/// (ChatML: <|im_start|>/<|im_end|>; Llama 3: <|start_header_id|>; Llama 2: [INST];
/// Alpaca: "### Instruction:"), with ChatML's default system message read from the text.
/// UserError naming `source`, listing the known names and `--chat_template NAME` when the
/// text is none of them (or empty).
ChatFormat recognise_chat_template(const std::string& jinja, const std::string& source);

/// "alpaca", "chatml", "llama2", "llama3": the name chat_format_by_name takes.
std::string chat_template_name(ChatTemplateKind kind);

/// \brief The Hugging Face chat_template (Jinja) of `kind` that renders a conversation as
/// render_chat does and, with add_generation_prompt, ends where chat_generation_prompt's
/// prompt ends: what `convert` writes into tokenizer_config.json for a model trained in that
/// format. `default_system` (when not empty) is the system message of a conversation that
/// has none, rendered as render_chat renders that conversation with it in front (ChatML
/// writes it as a literal system turn, the form recognise_chat_template reads back as a
/// default, as in SmolLM2's template).
std::string chat_template_jinja(ChatTemplateKind kind, const std::string& default_system = "");

struct ChatMessage {
  std::string role;     ///< "system", "user" or "assistant"
  std::string content;
};

/// A piece of rendered text; `trainable` when the loss is computed on its tokens.
struct ChatSegment {
  std::string text;
  bool trainable = false;
};

/// \brief Renders a conversation exactly as the model's template would, split into segments.
/// Assistant content and the assistant's end-of-turn marker are trainable; everything else
/// (roles, headers, system and user text) is not. UserError for an unknown role, a
/// conversation without an assistant message, or (Llama 2) roles out of user/assistant order.
std::vector<ChatSegment> render_chat(const ChatFormat& format, const std::vector<ChatMessage>& messages);

/// \brief An Alpaca record ({"instruction", "input", "output"}) in the Alpaca prompt format:
/// Stanford Alpaca's preamble (`system` in its place when not empty), the instruction, the
/// "input" block only when `input` is not empty, "### Response:"; the output is trainable.
/// render_chat's Alpaca form of a conversation of one user and one assistant message is the
/// same text, so `generate --chat --chat_template alpaca` prompts as training rendered.
std::vector<ChatSegment> render_alpaca(const std::string& instruction, const std::string& input,
                                       const std::string& output, const std::string& system = "");

}  // namespace meshtrain::data
