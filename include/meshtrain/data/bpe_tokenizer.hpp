#pragma once
/// \file
/// \brief BPE tokenizers as Hugging Face `tokenizers` runs them: added tokens matched first
/// (leftmost, then longest), then per remaining segment a normalizer, a pre-tokenizer that
/// splits it into pieces, the BPE model on each piece (merges by rank, lowest first and
/// leftmost on ties), and for decoding a decoder pipeline. `BpeConfig` holds that pipeline
/// as data; it is filled from a tokenizer.json (tokenizer_json.cpp) or from a GGUF file's
/// tokenizer.ggml.* metadata (tokenizer_gguf.cpp).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer.hpp"
#include "data/tokenizer_config.hpp"

namespace meshtrain::formats {
class GgufFile;
}

namespace meshtrain::data {

/// How the matches of a split pattern become pieces (HF SplitDelimiterBehavior).
enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

struct NormalizerStep {
  enum class Kind { Prepend, Replace } kind;
  std::string a;  ///< Prepend: the prefix; Replace: the literal pattern
  std::string b;  ///< Replace: the replacement
};

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace } kind;
  // Split
  std::string pattern;            ///< PCRE2 pattern (Unicode classes) or a literal
  bool literal = false;
  SplitBehavior behavior = SplitBehavior::Isolated;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;          ///< split with the GPT-2 pattern first
  // Metaspace
  std::string replacement = "\xE2\x96\x81";  ///< U+2581
  enum class Prepend { Always, First, Never } prepend = Prepend::Always;
  bool split = true;
};

struct DecoderStep {
  enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
  std::string a, b;               ///< Replace: pattern, content; Strip: content; Metaspace: replacement
  int start = 0, stop = 0;        ///< Strip
  PreTokenizerStep::Prepend prepend = PreTokenizerStep::Prepend::Always;  ///< Metaspace
};

struct AddedToken {
  std::int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false, rstrip = false;
};

/// \brief Everything that defines a BPE tokenizer.
struct BpeConfig {
  std::string name;                                            ///< the spec it came from
  std::vector<std::string> vocab;                              ///< id -> token ("" for an unused id)
  std::vector<std::pair<std::string, std::string>> merges;     ///< rank order
  std::vector<AddedToken> added;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<DecoderStep> decoder;
  bool byte_fallback = false;   ///< unknown characters become <0xHH> byte tokens
  bool fuse_unk = false;
  bool ignore_merges = false;   ///< a piece that is a whole vocabulary token is taken as is
  std::string unk_token;        ///< "" = none
  std::int32_t bos_id = -1, eos_id = -1, pad_id = -1, eot_id = -1;
  bool add_bos = false;
};

/// A BPE tokenizer running `config`. UserError when a merge names a token that is not in the
/// vocabulary, an added token's id is outside it, or a pattern does not compile.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeConfig config);

/// The config of a Hugging Face tokenizer.json (model BPE); `cfg` is the directory's
/// tokenizer_config.json (read_tokenizer_config; empty when there is none): it supplies
/// add_bos_token and the bos/eos/pad tokens. UserError naming `path` and the unsupported
/// component for anything it does not implement.
BpeConfig bpe_config_from_tokenizer_json(const std::string& path, const TokenizerConfig& cfg = {});

/// The config of a GGUF file whose tokenizer.ggml.model is "gpt2" (byte-level BPE), the
/// pre-tokenizer regexes chosen by tokenizer.ggml.pre as llama.cpp does.
BpeConfig bpe_config_from_gguf(const formats::GgufFile& gguf);

/// The pre-tokenizer names of GGUF files that bpe_config_from_gguf knows, sorted.
std::vector<std::string> known_gguf_pre_tokenizers();

}  // namespace meshtrain::data
