#pragma once
/// \file
/// \brief A Hugging Face tokenizer_config.json, read and validated in one place: the special
/// tokens it names, whether the tokenizer adds a BOS, and the chat template (or the
/// chat_template.jinja beside it). The BPE and
/// SentencePiece tokenizers and the chat templates all read it through here, so that a value
/// of the wrong shape is refused by name once instead of passed over (another BOS, EOS,
/// padding or template used unsaid) by each reader.

#include <filesystem>
#include <optional>
#include <string>

namespace meshtrain::data {

struct TokenizerConfig {
  std::string bos_token, eos_token, pad_token;  ///< the token's text; "" when not named (absent or null)
  std::optional<bool> add_bos_token;            ///< absent or null: the tokenizer's own convention
  /// The chat template: the text of chat_template.jinja beside the config where that file
  /// exists, else the config's "chat_template" (a string, or the "default" entry of a list of
  /// named templates); "" when there is none.
  std::string chat_template;
};

/// The chat template's own file in a Hugging Face directory (transformers 4.47 and later).
inline constexpr const char* kChatTemplateFile = "chat_template.jinja";

/// The tokenizer_config.json at `file`; an empty config when the file does not exist.
/// UserError naming the file when it is no valid JSON or no JSON object, when bos_token,
/// eos_token or pad_token is neither a string nor {"content": string}, when add_bos_token is
/// not a boolean, or when chat_template is neither a string nor a list of
/// {"name": string, "template": string} objects (null counts as absent throughout).
/// chat_template.jinja in the same directory, where it exists, is the chat template (as in
/// transformers, it wins over the config's); UserError naming it when it cannot be read.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& file);

/// The tokenizer_config.json that belongs to a tokenizer spec: DIR/tokenizer_config.json for
/// a directory, the one beside a tokenizer.json or tokenizer.model file.
std::filesystem::path tokenizer_config_of(const std::string& tokenizer_spec);

}  // namespace meshtrain::data
