#pragma once
/// \file
/// \brief SentencePiece tokenizers (Llama 2, Mistral, T5 ...) run by Google's own library
/// (Debian libsentencepiece-dev), so ids are the reference's by construction. Special pieces
/// written in the text (control pieces such as "<s>", "</s>", "<|im_end|>"; the named
/// bos/eos/pad; a GGUF's user-defined tokens) are matched first and are their ids, each text
/// between them encoded alone with its own dummy prefix: Hugging Face's Llama tokenizer with
/// legacy=True, Llama 2's tokenizer.json and llama.cpp (doc/data.md, "Tokenizers").

#include <memory>
#include <string>

#include "data/tokenizer.hpp"
#include "data/tokenizer_config.hpp"

namespace meshtrain::formats {
class GgufFile;
}

namespace meshtrain::data {

/// A tokenizer.model file; `cfg` is the tokenizer_config.json beside it (read_tokenizer_config;
/// empty when there is none): add_bos_token and bos/eos/pad tokens that name pieces of the
/// vocabulary. `name` is the spec it was made from. UserError when the file does not load.
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path, const TokenizerConfig& cfg,
                                                        const std::string& name);

/// The SentencePiece model described by a GGUF file with tokenizer.ggml.model = "llama"
/// (tokens, scores, token types, special ids, add_space_prefix), as llama.cpp runs it: a BPE
/// model merging by score, without normalisation, with byte fallback.
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer_from_gguf(const formats::GgufFile& gguf,
                                                                  const std::string& name);

/// The serialized SentencePiece ModelProto of that model: the bytes of the tokenizer.model
/// file that SentencePiece itself (and transformers' LlamaTokenizer) loads -- what
/// `convert` exports for such a GGUF. UserError when the metadata is inconsistent.
std::string sentencepiece_model_proto_from_gguf(const formats::GgufFile& gguf);

}  // namespace meshtrain::data
