// The byte tokenizer, and make_tokenizer: which file kind a spec names and who reads it.
#include "data/tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/gguf_file.hpp"
#include "core/error.hpp"
#include "data/bpe_tokenizer.hpp"
#include "data/sentencepiece_tokenizer.hpp"
#include "data/tokenizer_config.hpp"
#include "tokenizer_hash.hpp"

namespace meshtrain::data {

namespace fs = std::filesystem;

std::vector<std::int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  encode_into(text, [&](const std::int32_t* p, std::size_t n) { ids.insert(ids.end(), p, p + n); });
  return ids;
}

std::vector<std::int32_t> Tokenizer::encode_sequence(const std::string& text) const {
  std::vector<std::int32_t> ids;
  if (add_bos() && bos_id() >= 0) ids.push_back(bos_id());
  encode_into(text, [&](const std::int32_t* p, std::size_t n) { ids.insert(ids.end(), p, p + n); });
  return ids;
}

void ByteTokenizer::encode_into(const std::string& text, const IdSink& sink) const {
  constexpr std::size_t kPart = std::size_t{1} << 16;
  std::vector<std::int32_t> ids;
  for (std::size_t at = 0; at < text.size(); at += kPart) {
    const std::size_t n = std::min(kPart, text.size() - at);
    ids.resize(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<unsigned char>(text[at + i]);
    sink(ids.data(), n);
  }
}

std::string ByteTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (id >= 0 && id < 256) out += static_cast<char>(id);
    else if (id == kEot) out += "<|endoftext|>";
    else out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
  }
  return out;
}

bool Tokenizer::decode_with_ends(const std::vector<std::int32_t>& ids, std::string& text,
                                 std::vector<std::size_t>& ends) const {
  text = decode(ids);
  ends.assign(ids.size(), 0);
  std::size_t pos = 0;
  bool spans = true;
  for (std::size_t k = 0; k < ids.size() && spans; ++k) {
    const std::string piece = decode({ids[k]});
    spans = text.compare(pos, piece.size(), piece) == 0;
    pos += piece.size();
    ends[k] = pos;
  }
  if (spans && pos == text.size()) return true;
  // Decoding is context-dependent (a leading space dropped at the start, bytes that form a
  // character together): decode growing prefixes, each of which must be a prefix of the text.
  std::size_t prev = 0;
  std::vector<std::int32_t> prefix;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    prefix.push_back(ids[k]);
    const std::string d = decode(prefix);
    if (d.size() < prev || d.size() > text.size() || text.compare(0, d.size(), d) != 0) return false;
    ends[k] = prev = d.size();
  }
  if (!ends.empty()) ends.back() = text.size();
  return true;
}

std::string Digest::hex() const { return strprintf("%016llx%016llx", static_cast<unsigned long long>(a_),
                                                   static_cast<unsigned long long>(b_)); }

std::string bpe_hash(const BpeConfig& c) {
  Digest d;
  d.add_field("bpe");
  for (const auto& t : c.vocab) d.add_field(t);
  d.add_field("merges");
  for (const auto& [a, b] : c.merges) {
    d.add_field(a);
    d.add_field(b);
  }
  d.add_field("added");
  for (const auto& a : c.added) d.add_field(strprintf("%d", a.id));
  return d.hex();
}

std::vector<std::string> known_tokenizers() { return {"byte"}; }

std::string tokenizer_spec_help() {
  return "byte | a tokenizer.json | a Hugging Face model directory | a SentencePiece *.model | a .gguf file | a "
         "meshtrain checkpoint, checkpoint directory or run directory (the tokenizer its checkpoints record)";
}

namespace {

std::unique_ptr<Tokenizer> from_gguf(const std::string& path) {
  const formats::GgufFile gguf(path);
  const std::string model = gguf.metadata_string("tokenizer.ggml.model", "");
  if (model == "gpt2") {
    BpeConfig c = bpe_config_from_gguf(gguf);
    c.name = path;
    return make_bpe_tokenizer(std::move(c));
  }
  if (model == "llama") return make_sentencepiece_tokenizer_from_gguf(gguf, path);
  if (model.empty())
    throw UserError(strprintf("GGUF file %s has no tokenizer (no tokenizer.ggml.model); give the model's "
                              "tokenizer.json or tokenizer.model with --tokenizer",
                              path.c_str()));
  throw UserError(strprintf("GGUF file %s has a tokenizer of kind '%s'; meshtrain reads 'gpt2' (byte-level BPE) and "
                            "'llama' (SentencePiece) tokenizers",
                            path.c_str(), model.c_str()));
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  std::error_code ec;
  if (!fs::exists(spec, ec))
    throw UserError(strprintf("tokenizer '%s' is neither 'byte' nor an existing file or directory; give %s",
                              spec.c_str(), tokenizer_spec_help().c_str()));
  if (fs::is_directory(spec, ec)) {
    const fs::path dir(spec);
    const TokenizerConfig config = read_tokenizer_config(tokenizer_config_of(spec));
    if (fs::exists(dir / "tokenizer.json")) {
      BpeConfig c = bpe_config_from_tokenizer_json((dir / "tokenizer.json").string(), config);
      c.name = spec;
      return make_bpe_tokenizer(std::move(c));
    }
    if (fs::exists(dir / "tokenizer.model")) return make_sentencepiece_tokenizer((dir / "tokenizer.model").string(), config, spec);
    throw UserError(strprintf("directory %s holds neither tokenizer.json nor tokenizer.model; give %s",
                              spec.c_str(), tokenizer_spec_help().c_str()));
  }
  if (formats::looks_like_gguf(spec)) return from_gguf(spec);
  const std::string ext = fs::path(spec).extension().string();
  if (ext == ".json") {
    BpeConfig c = bpe_config_from_tokenizer_json(spec, read_tokenizer_config(tokenizer_config_of(spec)));
    c.name = spec;
    return make_bpe_tokenizer(std::move(c));
  }
  if (ext == ".model") {
    return make_sentencepiece_tokenizer(spec, read_tokenizer_config(tokenizer_config_of(spec)), spec);
  }
  throw UserError(strprintf("cannot tell what kind of tokenizer %s is; give %s", spec.c_str(),
                            tokenizer_spec_help().c_str()));
}

TokenizerIdentity identity_of(const Tokenizer& tok) { return {tok.kind(), tok.vocab_size(), tok.hash()}; }

void check_tokenizer_match(const TokenizerIdentity& dataset, const TokenizerIdentity& model,
                           const std::string& dataset_name, const std::string& model_name) {
  if (!dataset.kind.empty() && !model.kind.empty() && dataset.kind != model.kind)
    throw UserError(strprintf("%s was tokenized with a %s tokenizer but %s uses a %s tokenizer; re-run `meshtrain "
                              "prepare --tokenizer` with the model's tokenizer",
                              dataset_name.c_str(), dataset.kind.c_str(), model_name.c_str(), model.kind.c_str()));
  if (dataset.vocab_size > 0 && model.vocab_size > 0 && dataset.vocab_size > model.vocab_size)
    throw UserError(strprintf("the tokenizer of %s has %lld ids but the one of %s has %lld: the dataset was made with "
                              "another tokenizer; re-run `meshtrain prepare --tokenizer` with the model's",
                              dataset_name.c_str(), static_cast<long long>(dataset.vocab_size), model_name.c_str(),
                              static_cast<long long>(model.vocab_size)));
  if (!dataset.hash.empty() && !model.hash.empty() && dataset.hash != model.hash)
    throw UserError(strprintf("the tokenizer of %s (%s, %lld ids, hash %s) differs from the one of %s (%s, %lld ids, "
                              "hash %s); re-run `meshtrain prepare --tokenizer` with the model's tokenizer",
                              dataset_name.c_str(), dataset.kind.c_str(), static_cast<long long>(dataset.vocab_size),
                              dataset.hash.c_str(), model_name.c_str(), model.kind.c_str(),
                              static_cast<long long>(model.vocab_size), model.hash.c_str()));
}

}  // namespace meshtrain::data
