// Hugging Face tokenizer.json -> BpeConfig. Only what changes ids is read; a component that
// is not implemented is a UserError naming it, never silently ignored.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "core/checked_int.hpp"
#include "core/error.hpp"
#include "core/file_io.hpp"
#include "data/bpe_tokenizer.hpp"
#include "formats/json.hpp"

namespace meshtrain::data {
namespace {

using nlohmann::json;

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  throw UserError(strprintf("tokenizer %s uses %s, which meshtrain does not implement; supported: BPE models with "
                            "ByteLevel/Split/Digits/Metaspace pre-tokenizers and Prepend/Replace normalizers "
                            "(or give a SentencePiece tokenizer.model)",
                            path.c_str(), what.c_str()));
}

std::string str_or(const json& j, const char* key, const std::string& fallback) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}
bool bool_or(const json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

/// Ids above this are no tokenizer's (and keep vocab-sized tables small).
constexpr long long kMaxTokenId = (1 << 24) - 1;

/// An integer of the file: a JSON integer in lo..hi. A float (an id of 1.5, or 3.0, which
/// Hugging Face's serde u32 refuses too), a string or an out-of-range value is a UserError
/// naming the file, the key and the value as written, never truncated.
long long int_member(const json& v, const std::string& path, const std::string& key, long long lo, long long hi) {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    throw_int_out_of_range(path, key, v.dump(), lo, hi);
  if (v.is_number_integer()) return checked_int<long long>(v.get<std::int64_t>(), path, key, lo, hi);
  throw UserError(strprintf("%s: %s = %s is not an integer", path.c_str(), key.c_str(), v.dump().c_str()));
}

/// {"String": s} or {"Regex": r}: the pattern and whether it is literal.
std::pair<std::string, bool> pattern_of(const json& p, const std::string& path) {
  if (p.contains("String")) return {p["String"].get<std::string>(), true};
  if (p.contains("Regex")) return {p["Regex"].get<std::string>(), false};
  unsupported(path, "a pattern that is neither String nor Regex");
}

void add_normalizer(const json& n, std::vector<NormalizerStep>& out, const std::string& path) {
  if (n.is_null()) return;
  const std::string type = str_or(n, "type", "");
  if (type == "Sequence") {
    for (const auto& s : n["normalizers"]) add_normalizer(s, out, path);
  } else if (type == "Prepend") {
    out.push_back({NormalizerStep::Kind::Prepend, n["prepend"].get<std::string>(), ""});
  } else if (type == "Replace") {
    const auto [pat, literal] = pattern_of(n["pattern"], path);
    if (!literal) unsupported(path, "a Replace normalizer with a regex");
    out.push_back({NormalizerStep::Kind::Replace, pat, n["content"].get<std::string>()});
  } else {
    unsupported(path, "the normalizer '" + type + "'");
  }
}

PreTokenizerStep::Prepend prepend_scheme(const json& j) {
  if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "first") return PreTokenizerStep::Prepend::First;
    if (s == "never") return PreTokenizerStep::Prepend::Never;
    return PreTokenizerStep::Prepend::Always;
  }
  // Older files: add_prefix_space.
  return bool_or(j, "add_prefix_space", true) ? PreTokenizerStep::Prepend::Always : PreTokenizerStep::Prepend::Never;
}

void add_pre_tokenizer(const json& p, std::vector<PreTokenizerStep>& out, const std::string& path) {
  if (p.is_null()) return;
  const std::string type = str_or(p, "type", "");
  PreTokenizerStep s{};
  if (type == "Sequence") {
    for (const auto& q : p["pretokenizers"]) add_pre_tokenizer(q, out, path);
    return;
  }
  if (type == "Split") {
    s.kind = PreTokenizerStep::Kind::Split;
    std::tie(s.pattern, s.literal) = pattern_of(p["pattern"], path);
    if (bool_or(p, "invert", false)) unsupported(path, "an inverted Split pre-tokenizer");
    const std::string b = str_or(p, "behavior", "Isolated");
    if (b == "Isolated") s.behavior = SplitBehavior::Isolated;
    else if (b == "Removed") s.behavior = SplitBehavior::Removed;
    else if (b == "MergedWithPrevious") s.behavior = SplitBehavior::MergedWithPrevious;
    else if (b == "MergedWithNext") s.behavior = SplitBehavior::MergedWithNext;
    else if (b == "Contiguous") s.behavior = SplitBehavior::Contiguous;
    else unsupported(path, "the Split behaviour '" + b + "'");
  } else if (type == "Digits") {
    // HF Digits: char::is_numeric, i.e. Unicode N; each digit alone or runs of digits.
    s.kind = PreTokenizerStep::Kind::Split;
    s.pattern = bool_or(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+";
    s.behavior = SplitBehavior::Isolated;
  } else if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::ByteLevel;
    s.add_prefix_space = bool_or(p, "add_prefix_space", false);
    s.use_regex = bool_or(p, "use_regex", true);
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::Metaspace;
    s.replacement = str_or(p, "replacement", "\xE2\x96\x81");
    s.prepend = prepend_scheme(p);
    s.split = bool_or(p, "split", true);
  } else {
    unsupported(path, "the pre-tokenizer '" + type + "'");
  }
  out.push_back(std::move(s));
}

void add_decoder(const json& d, std::vector<DecoderStep>& out, const std::string& path) {
  if (d.is_null()) return;
  const std::string type = str_or(d, "type", "");
  DecoderStep s{};
  if (type == "Sequence") {
    for (const auto& q : d["decoders"]) add_decoder(q, out, path);
    return;
  }
  if (type == "ByteLevel") {
    s.kind = DecoderStep::Kind::ByteLevel;
  } else if (type == "Replace") {
    s.kind = DecoderStep::Kind::Replace;
    const auto [pat, literal] = pattern_of(d["pattern"], path);
    if (!literal) unsupported(path, "a Replace decoder with a regex");
    s.a = pat;
    s.b = d["content"].get<std::string>();
  } else if (type == "ByteFallback") {
    s.kind = DecoderStep::Kind::ByteFallback;
  } else if (type == "Fuse") {
    s.kind = DecoderStep::Kind::Fuse;
  } else if (type == "Strip") {
    s.kind = DecoderStep::Kind::Strip;
    s.a = str_or(d, "content", " ");
    s.start = d.contains("start") ? static_cast<int>(int_member(d["start"], path, "decoder.start", 0, 1 << 20)) : 0;
    s.stop = d.contains("stop") ? static_cast<int>(int_member(d["stop"], path, "decoder.stop", 0, 1 << 20)) : 0;
  } else if (type == "Metaspace") {
    s.kind = DecoderStep::Kind::Metaspace;
    s.a = str_or(d, "replacement", "\xE2\x96\x81");
    s.prepend = prepend_scheme(d);
  } else {
    unsupported(path, "the decoder '" + type + "'");
  }
  out.push_back(std::move(s));
}

}  // namespace

BpeConfig bpe_config_from_tokenizer_json(const std::string& path, const TokenizerConfig& cfg) {
  const std::string text = file_io::read_text_file(path, "the tokenizer file");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw UserError(strprintf("tokenizer %s is not valid JSON: %s", path.c_str(), formats::json_error_text(e).c_str()));
  }
  try {
    BpeConfig c;
    c.name = path;
    const json& model = j.at("model");
    const std::string mtype = str_or(model, "type", "BPE");
    if (mtype != "BPE") unsupported(path, "the model type '" + mtype + "'");
    if (!str_or(model, "continuing_subword_prefix", "").empty() || !str_or(model, "end_of_word_suffix", "").empty())
      unsupported(path, "a BPE continuing_subword_prefix / end_of_word_suffix");
    if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0)
      unsupported(path, "BPE dropout");
    c.byte_fallback = bool_or(model, "byte_fallback", false);
    c.fuse_unk = bool_or(model, "fuse_unk", false);
    c.ignore_merges = bool_or(model, "ignore_merges", false);
    c.unk_token = str_or(model, "unk_token", "");
    for (const auto& [tok, id] : model.at("vocab").items()) {
      const long long i = int_member(id, path, "model.vocab[\"" + tok + "\"]", 0, kMaxTokenId);
      if (static_cast<std::size_t>(i) >= c.vocab.size()) c.vocab.resize(i + 1);
      c.vocab[i] = tok;
    }
    for (const auto& m : model.at("merges")) {
      if (m.is_array()) {
        c.merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
      } else {
        const std::string s = m.get<std::string>();
        const std::size_t sp = s.find(' ');
        MESHTRAIN_REQUIRE(sp != std::string::npos, "tokenizer %s: merge '%s' is not two tokens", path.c_str(), s.c_str());
        c.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      }
    }
    if (j.contains("added_tokens"))
      for (const auto& a : j["added_tokens"]) {
        if (bool_or(a, "single_word", false)) unsupported(path, "a single_word added token");
        AddedToken t;
        t.id = static_cast<std::int32_t>(int_member(a.at("id"), path, "added_tokens[].id", 0, kMaxTokenId));
        t.content = a.at("content").get<std::string>();
        t.special = bool_or(a, "special", false);
        t.lstrip = bool_or(a, "lstrip", false);
        t.rstrip = bool_or(a, "rstrip", false);
        c.added.push_back(t);
      }
    add_normalizer(j.value("normalizer", json()), c.normalizer, path);
    add_pre_tokenizer(j.value("pre_tokenizer", json()), c.pre_tokenizer, path);
    add_decoder(j.value("decoder", json()), c.decoder, path);

    // Special ids: tokenizer_config.json names them; the post-processor's template says
    // whether a BOS leads each sequence.
    auto find = [&](const std::string& t) -> std::int32_t {
      if (t.empty()) return -1;
      for (const auto& a : c.added)
        if (a.content == t) return a.id;
      for (std::size_t i = 0; i < c.vocab.size(); ++i)
        if (c.vocab[i] == t) return static_cast<std::int32_t>(i);
      return -1;
    };
    c.bos_id = find(cfg.bos_token);
    c.eos_id = find(cfg.eos_token);
    c.pad_id = find(cfg.pad_token);
    // The post-processor's template says whether a BOS leads each sequence, and which token
    // it is (the id a tokenizer_config.json without bos_token does not name).
    const json post = j.value("post_processor", json());
    if (post.is_object() && str_or(post, "type", "") == "TemplateProcessing" && post.contains("single")) {
      const json& first = post["single"].at(0);
      c.add_bos = first.contains("SpecialToken");
      if (c.add_bos && c.bos_id < 0 && first["SpecialToken"].is_object())
        c.bos_id = find(str_or(first["SpecialToken"], "id", ""));
    }
    for (const char* t : {"<|begin_of_text|>", "<s>", "<bos>"})
      if (c.bos_id < 0) c.bos_id = find(t);
    for (const char* t : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>"})
      if (c.eos_id < 0) c.eos_id = find(t);
    c.eot_id = find("<|endoftext|>");
    if (c.eot_id < 0) c.eot_id = c.eos_id;
    // A tokenizer without end-of-text or BOS is still a tokenizer (tokenize, generate): prepare
    // refuses it by name where its format needs the missing token.
    if (cfg.add_bos_token) c.add_bos = *cfg.add_bos_token;
    return c;
  } catch (const json::exception& e) {
    throw UserError(strprintf("tokenizer %s is not a tokenizer.json of the expected form: %s", path.c_str(),
                              formats::json_error_text(e).c_str()));
  }
}

}  // namespace meshtrain::data
