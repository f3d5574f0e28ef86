#pragma once
/// \file
/// \brief Instruction and chat examples for `prepare --format alpaca|chat`: a JSONL line is
/// parsed and rendered with a chat template into segments (chat_template.hpp), and the
/// rendered text is tokenized as a whole with a per-token loss mask (1 on the tokens of the
/// trainable segments: the assistant's / response's text and its end-of-turn marker).

#include <cstdint>
#include <string>
#include <vector>

#include "data/chat_template.hpp"
#include "data/tokenizer.hpp"

namespace meshtrain::data {

enum class ExampleFormat { Alpaca, Chat };

/// \brief One JSONL line rendered with `format`: Alpaca {"instruction", "input" (optional),
/// "output"} or chat {"messages": [{"role", "content"}, ...]}. An Alpaca record becomes a
/// user message (instruction, then a blank line and the input when there is one) and an
/// assistant message, rendered with the chat template, except with the Alpaca template,
/// which renders the classic Alpaca prompt (render_alpaca). `system` (when not empty) is the
/// system message of conversations that have none (with the Alpaca template: the preamble). UserError saying what is wrong with the
/// line (not JSON, a missing or non-string field, an unknown role, no assistant message);
/// the caller adds the file and line number.
std::vector<ChatSegment> render_example(const std::string& jsonl_line, ExampleFormat format,
                                        const ChatFormat& chat_format, const std::string& system);

/// The system message render_example and render_preference give a conversation that has
/// none: `system` when not empty, else the default system turn of `chat_format` (the one its
/// template writes, as SmolLM2's); "" when neither (no system turn). prepare records it in
/// meta.json (chat_system) for `generate --chat` and exports to prompt with.
std::string default_system_message(const ChatFormat& chat_format, const std::string& system);

/// \brief A preference record rendered twice: the conversation ending with the chosen
/// response and the same conversation ending with the rejected one. Only the final
/// response (its content and end-of-turn marker) is trainable in each; assistant turns of
/// the prompt's history are context, like the system and user text.
struct PreferenceSegments {
  std::vector<ChatSegment> chosen, rejected;
};

/// \brief One `prepare --format preference` JSONL line: the prompt as `"prompt"` (a string:
/// one user message) or `"messages"` (a conversation of system/user/assistant messages whose
/// last message is the user's), and `"chosen"` / `"rejected"`, each a string, an assistant
/// message {"role": "assistant", "content": ...} or a list holding exactly one such message
/// (TRL's conversational form). `system` (when not empty) is the system message of prompts
/// that have none. UserError saying what is wrong with the line: not JSON, both or neither
/// prompt forms, a missing or non-string field, a response that is empty (or white space
/// only), a response message whose role is not assistant, a conversation not ending with a
/// user message, chosen equal to rejected; the caller adds the file and line number.
PreferenceSegments render_preference(const std::string& jsonl_line, const ChatFormat& chat_format,
                                     const std::string& system);

/// \brief UserError unless the end-of-turn marker of `format` (end_of_turn_marker) is ONE token
/// of `tok`: encoded as several ids it would be trained on as plain text, and a model
/// fine-tuned on that never emits its real end-of-turn token (Llama 2's "</s>" as "▁ < / s >"
/// instead of EOS). The message names the template (`template_name`), the marker, how many
/// ids it encodes to, and the ways on (another --chat_template, or a tokenizer that has the
/// marker as a token). Nothing to check for Alpaca (its responses end with end-of-text) nor
/// for the byte tokenizer, which has no vocabulary to hold a marker: every marker is bytes to
/// it, in prepare and in generate --chat alike (a model trained from scratch learns them).
void require_end_of_turn_token(const Tokenizer& tok, const ChatFormat& format, const std::string& template_name);

/// Token ids of an example and one loss-mask byte per id.
struct MaskedTokens {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;  ///< 1: the loss is computed on this token
};

/// \brief Tokenizes the concatenated segments AS ONE TEXT (so the ids are exactly those of
/// tokenizing the rendered example, whatever the tokenizer does at segment boundaries), then
/// marks a token 1 when any byte of it lies in a trainable segment (a token without bytes of
/// its own, like the leading bytes of a byte-fallback character, goes with the byte it
/// starts). The byte span of each token comes from Tokenizer::decode_with_ends, one linear
/// pass for the BPE and SentencePiece tokenizers. BOS is put first when the tokenizer's model expects one and
/// the text does not start with it (mask 0). UserError when the tokenizer does not decode
/// back to the rendered text (a normalising tokenizer), naming it.
MaskedTokens tokenize_with_mask(const Tokenizer& tok, const std::vector<ChatSegment>& segments);

}  // namespace meshtrain::data
