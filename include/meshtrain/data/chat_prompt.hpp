#pragma once
/// \file
/// \brief Prompts for chatting with a model (`meshtrain generate --chat`): one user message
/// rendered with the model's chat template up to where the assistant's reply begins (what
/// Hugging Face calls add_generation_prompt), and the end-of-turn marker that ends a reply.

#include <string>

#include "data/chat_template.hpp"

namespace meshtrain::data {

struct ChatPrompt {
  std::string text;         ///< the rendered conversation up to the assistant's reply
  std::string end_of_turn;  ///< what the template writes after a reply ("<|im_end|>"); "" for none (Alpaca)
  /// Text the template writes with the reply, before its content, which the model generates
  /// as part of its first token: Llama 2's " " (its template writes ' ' + content; with a
  /// SentencePiece or Metaspace tokenizer the space is the '▁' of the reply's first piece, so
  /// a prompt ending with it would be a lone '▁' the model never saw in training). Not in
  /// `text`; generate --chat drops it from the front of the decoded reply. "" for the others.
  std::string reply_lead;
};

/// `user_message` (and `system` unless empty) rendered with `format` for the model to reply.
ChatPrompt chat_generation_prompt(const ChatFormat& format, const std::string& user_message,
                                  const std::string& system = "");

/// The chat template (Jinja text) that comes with a tokenizer spec: a .gguf file's
/// tokenizer.chat_template, or the chat_template of the tokenizer_config.json in a Hugging
/// Face directory (or beside a tokenizer.json / tokenizer.model); "" when there is none.
std::string chat_template_text(const std::string& tokenizer_spec);

}  // namespace meshtrain::data
