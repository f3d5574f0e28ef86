// GGUF tokenizer.ggml.* (model "gpt2") -> BpeConfig, with the pre-tokenizer regexes that
// llama.cpp (src/llama-vocab.cpp, llm_tokenizer_bpe) uses for each tokenizer.ggml.pre name.
#include <initializer_list>
#include <map>

#include "formats/gguf_file.hpp"
#include "core/checked_int.hpp"
#include "core/error.hpp"
#include "data/bpe_tokenizer.hpp"

namespace meshtrain::data {
namespace {

const char* const kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const char* const kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

/// tokenizer.ggml.pre -> the regexes applied one after another (each isolates its matches).
const std::map<std::string, std::vector<std::string>>& pre_regexes() {
  static const std::map<std::string, std::vector<std::string>> m = [] {
    std::map<std::string, std::vector<std::string>> r;
    for (const char* n : {"gpt-2", "gpt2", "mpt", "olmo", "jais", "trillion"}) r[n] = {kGpt2};
    for (const char* n : {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"})
      r[n] = {"\\p{N}", kGpt2};
    for (const char* n : {"llama-bpe", "llama3", "dbrx", "smaug-bpe", "chatglm-bpe"}) r[n] = {kLlama3};
    for (const char* n : {"qwen2", "stablelm2", "hunyuan"}) r[n] = {kQwen2};
    r["default"] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"};
    return r;
  }();
  return m;
}

}  // namespace

std::vector<std::string> known_gguf_pre_tokenizers() {
  std::vector<std::string> names;
  for (const auto& [k, v] : pre_regexes()) names.push_back(k);
  return names;
}

BpeConfig bpe_config_from_gguf(const formats::GgufFile& g) {
  BpeConfig c;
  c.name = g.path();
  c.vocab = g.metadata_string_array("tokenizer.ggml.tokens");
  const std::vector<std::int64_t> types = g.has_metadata("tokenizer.ggml.token_type")
                                              ? g.metadata_int_array("tokenizer.ggml.token_type")
                                              : std::vector<std::int64_t>(c.vocab.size(), 1);
  MESHTRAIN_REQUIRE(types.size() == c.vocab.size(),
                    "GGUF file %s: tokenizer.ggml.token_type has %zu entries for %zu tokens", g.path().c_str(),
                    types.size(), c.vocab.size());
  for (const std::string& m : g.metadata_string_array("tokenizer.ggml.merges")) {
    const std::size_t sp = m.find(' ', 1);
    MESHTRAIN_REQUIRE(sp != std::string::npos, "GGUF file %s: merge '%s' is not two tokens", g.path().c_str(),
                      m.c_str());
    c.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  // Control (3) and user-defined (4) tokens are matched in the text before BPE, as llama.cpp
  // does with its special-token cache and HF with added tokens.
  for (std::size_t i = 0; i < c.vocab.size(); ++i)
    if ((types[i] == 3 || types[i] == 4) && !c.vocab[i].empty())
      c.added.push_back({static_cast<std::int32_t>(i), c.vocab[i], types[i] == 3, false, false});
  const std::string pre = g.metadata_string("tokenizer.ggml.pre", "default");
  const auto it = pre_regexes().find(pre);
  if (it == pre_regexes().end()) {
    std::string names;
    for (const auto& n : known_gguf_pre_tokenizers()) names += (names.empty() ? "" : ", ") + n;
    throw UserError(strprintf("GGUF file %s: pre-tokenizer '%s' (tokenizer.ggml.pre) is not one meshtrain knows (%s); "
                              "give the model's tokenizer.json with --tokenizer instead",
                              g.path().c_str(), pre.c_str(), names.c_str()));
  }
  for (const std::string& re : it->second) {
    PreTokenizerStep s{};
    s.kind = PreTokenizerStep::Kind::Split;
    s.pattern = re;
    s.behavior = SplitBehavior::Isolated;
    c.pre_tokenizer.push_back(s);
  }
  PreTokenizerStep bl{};
  bl.kind = PreTokenizerStep::Kind::ByteLevel;
  bl.use_regex = false;
  c.pre_tokenizer.push_back(bl);
  DecoderStep dec{};
  dec.kind = DecoderStep::Kind::ByteLevel;
  c.decoder.push_back(dec);
  // The special ids the metadata names, range-checked (an id past the vocabulary, or one
  // an int32 cannot hold, is an error naming the key); where it is silent, the token of a
  // known name. A missing one is no error here: prepare refuses it where its format needs it.
  const auto vocab = static_cast<long long>(c.vocab.size());
  const auto named = [&](std::initializer_list<const char*> names) -> std::int32_t {
    for (const char* n : names)
      for (std::size_t i = 0; i < c.vocab.size(); ++i)
        if (c.vocab[i] == n) return static_cast<std::int32_t>(i);
    return -1;
  };
  const auto id = [&](const char* key, std::initializer_list<const char*> names) -> std::int32_t {
    if (!g.has_metadata(key)) return named(names);
    return checked_int<std::int32_t>(g.metadata_int(key), g.path(), key, 0, vocab - 1,
                                     "(an id of its tokenizer.ggml.tokens)");
  };
  c.bos_id = id("tokenizer.ggml.bos_token_id", {"<|begin_of_text|>", "<s>", "<bos>"});
  c.eos_id = id("tokenizer.ggml.eos_token_id", {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"});
  c.pad_id = id("tokenizer.ggml.padding_token_id", {});
  c.add_bos = g.metadata_bool("tokenizer.ggml.add_bos_token", false);
  c.eot_id = named({"<|endoftext|>"});
  if (c.eot_id < 0) c.eot_id = c.eos_id;
  return c;
}

}  // namespace meshtrain::data
