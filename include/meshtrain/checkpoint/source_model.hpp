#pragma once
/// \brief The model a pretrained-weights source describes: a Hugging Face directory's
/// config.json or a GGUF file's metadata, as meshtrain `model.*` keys. Loading such a source
/// (checkpoint.init_from, eval/generate --checkpoint) takes the model's shape from it, so
/// the user does not restate it; a key the user gave that disagrees is an error.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::checkpoint {

/// A source's model settings: ("model.d_model", "576"), ... in config-key order. Empty
/// when `path` describes no model (a .safetensors file, a directory without config.json,
/// a meshtrain checkpoint). UserError for a config.json / GGUF metadata meshtrain cannot
/// run (an unknown architecture, rope scaling, biases in a Llama, a head_dim other than
/// d_model / n_heads), naming the key.
std::vector<std::pair<std::string, std::string>> source_model_keys(const std::string& path);

/// The context length pretrained source `path` declares: a Hugging Face directory's (or a
/// .safetensors file's directory's) config.json max_position_embeddings (Llama) or
/// n_positions (GPT-2), a GGUF's llama.context_length; 0 when it says none or `path` is
/// something else. Not a model.* key: meshtrain trains on its own model.max_seq_len windows,
/// the export keeps the source's range (checkpoint::TokenizerRef::source_context). Serial.
std::int64_t source_context_length(const std::string& path);

/// The model a meshtrain checkpoint (a step_*.h5 file) describes in /model, as the same
/// model.* keys plus "model.padded_vocab_size" (the stored padded vocabulary, which
/// model.vocab_pad_multiple must reproduce). Serial; UserError when the file is not a
/// readable meshtrain checkpoint.
std::vector<std::pair<std::string, std::string>> checkpoint_model_keys(const std::string& path);

}  // namespace meshtrain::checkpoint
