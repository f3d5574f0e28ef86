#pragma once
/// \file
/// \brief Instruction and chat examples for `prepare --format alpaca|chat`: a JSONL line is
/// parsed and rendered with a chat template into segments (chat_template.hpp), and the
/// rendered text is tokenized as a whole with a per-token loss mask (1 on the tokens of the
/// trainable segments: the assistant's / response's text and its end-of-turn marker).

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/data/chat_template.hpp"
#include "meshtrain/data/tokenizer.hpp"

namespace meshtrain::data {

enum class ExampleFormat { Alpaca, Chat };

/// \brief One JSONL line rendered with `format`: Alpaca {"instruction", "input" (optional),
/// "output"} or chat {"messages": [{"role", "content"}, ...]}. An Alpaca record becomes a
/// user message (instruction, then a blank line and the input when there is one) and an
/// assistant message, rendered with the chat template, except with the Alpaca template,
/// which renders the classic Alpaca prompt (render_alpaca). `system` (when not empty) is the
/// system message of conversations that have none. UserError saying what is wrong with the
/// line (not JSON, a missing or non-string field, an unknown role, no assistant message);
/// the caller adds the file and line number.
std::vector<ChatSegment> render_example(const std::string& jsonl_line, ExampleFormat format,
                                        const ChatFormat& chat_format, const std::string& system);

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
