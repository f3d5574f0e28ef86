// meta.json: written by prepare, read by Dataset::open.
#include <limits>
#include <stdexcept>

#include "core/checked_int.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "formats/json.hpp"

namespace meshtrain::data {
namespace {

using formats::Json;

const Json& member(const Json& obj, const char* key, Json::value_t kind, const std::string& path) {
  const auto it = obj.find(key);
  // A number's kind is the one it was read as: integers are also accepted where a number is.
  const bool ok = it != obj.end() && (kind == Json::value_t::number_float ? it->is_number() : it->type() == kind);
  MESHTRAIN_REQUIRE(ok, "%s has no valid \"%s\" entry; re-run `meshtrain prepare` to rewrite the dataset",
                    path.c_str(), key);
  return *it;
}

const Json& number(const Json& obj, const char* key, const std::string& path) {
  return member(obj, key, Json::value_t::number_float, path);
}

std::uint64_t unsigned_member(const Json& obj, const char* key, const std::string& path) {
  const Json& v = number(obj, key, path);
  MESHTRAIN_REQUIRE(v.is_number_unsigned(), "%s: \"%s\" must be a non-negative integer, got %s", path.c_str(), key,
                    v.dump().c_str());
  return v.get<std::uint64_t>();
}

std::int64_t signed_member(const Json& obj, const char* key, const std::string& path) {
  const Json& v = number(obj, key, path);
  const bool fits = v.is_number_integer() &&
                    (!v.is_number_unsigned() ||
                     v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
  MESHTRAIN_REQUIRE(fits, "%s: \"%s\" must be an integer, got %s", path.c_str(), key, v.dump().c_str());
  return v.get<std::int64_t>();
}

/// A special-token id: -1 (none) or an id an int32 holds; a wider one would wrap.
std::int32_t id_member(const Json& obj, const char* key, const std::string& path) {
  return checked_int<std::int32_t>(signed_member(obj, key, path), path, key, -1,
                                   std::numeric_limits<std::int32_t>::max());
}

std::string string_member(const Json& obj, const char* key, const std::string& path) {
  return member(obj, key, Json::value_t::string, path).get<std::string>();
}

}  // namespace

std::string meta_to_json(const DatasetMeta& m) {
  Json j;
  j["format"] = "meshtrain-dataset";
  j["tokenizer"] = m.tokenizer;
  j["tokenizer_kind"] = m.tokenizer_kind;
  j["tokenizer_hash"] = m.tokenizer_hash;
  j["vocab_size"] = m.vocab_size;
  j["eot_id"] = m.eot_id;
  j["bos_id"] = m.bos_id;
  j["eos_id"] = m.eos_id;
  j["pad_id"] = m.pad_id;
  j["add_bos"] = m.add_bos;
  j["train_tokens"] = m.train_tokens;
  j["val_tokens"] = m.val_tokens;
  j["val_fraction"] = m.val_fraction;
  j["val_split"] = m.val_split;
  j["bytes"] = m.bytes;
  j["train_entropy_bits"] = m.train_entropy_bits;
  j["meshtrain_version"] = m.meshtrain_version;
  // Keys of instruction/chat datasets only: a text dataset's meta.json is as it always was.
  if (m.row_tokens > 0) {
    j["data_format"] = m.data_format;
    j["seq_len"] = m.row_tokens - 1;
    j["row_tokens"] = m.row_tokens;
    j["chat_template"] = m.chat_template;
    if (m.chat_system) j["chat_system"] = *m.chat_system;
    j["train_examples"] = m.train_examples;
    j["val_examples"] = m.val_examples;
    j["truncated_examples"] = m.truncated_examples;
    j["dropped_examples"] = m.dropped_examples;
    j["fill_fraction"] = m.fill_fraction;
  }
  // Preference pairs: the chosen and rejected rows of pair i are rows 2i and 2i + 1.
  if (m.data_format == "preference") {
    j["row_layout"] = kPreferenceRowLayout;
    j["train_rows"] = m.train_rows;
    j["val_rows"] = m.val_rows;
  }
  // Packed rows (prepare --pack): several examples a row, train.docs/val.docs beside.
  if (m.packed) {
    j["packed"] = true;
    j["train_rows"] = m.train_rows;
    j["val_rows"] = m.val_rows;
    j["fill_fraction_unpacked"] = m.fill_fraction_unpacked;
  }
  j["source_files"] = m.source_files;
  return formats::json_pretty(j) + "\n";
}

DatasetMeta meta_from_json(const std::string& text, const std::string& path) {
  Json root;
  try {
    root = formats::parse_json(text);
  } catch (const std::runtime_error& e) {
    throw UserError(strprintf("%s is not valid JSON (%s); re-run `meshtrain prepare`", path.c_str(), e.what()));
  }
  MESHTRAIN_REQUIRE(root.is_object(), "%s must hold a JSON object", path.c_str());
  DatasetMeta m;
  m.tokenizer = string_member(root, "tokenizer", path);
  m.vocab_size = signed_member(root, "vocab_size", path);
  m.eot_id = id_member(root, "eot_id", path);
  // Written since tokenizers other than byte exist; older datasets lack them.
  if (const auto v = root.find("tokenizer_kind"); v != root.end() && v->is_string()) m.tokenizer_kind = *v;
  else if (m.tokenizer == "byte") m.tokenizer_kind = "byte";
  if (const auto v = root.find("tokenizer_hash"); v != root.end() && v->is_string()) m.tokenizer_hash = *v;
  if (root.contains("bos_id")) m.bos_id = id_member(root, "bos_id", path);
  if (root.contains("eos_id")) m.eos_id = id_member(root, "eos_id", path);
  if (root.contains("pad_id")) m.pad_id = id_member(root, "pad_id", path);
  if (const auto v = root.find("add_bos"); v != root.end()) {
    MESHTRAIN_REQUIRE(v->is_boolean(), "%s: \"add_bos\" must be true or false, got %s; re-run `meshtrain prepare`",
                      path.c_str(), v->dump().c_str());
    m.add_bos = v->get<bool>();
  }
  // A special token outside the vocabulary matches no token: a document mask on an eot_id
  // past the vocabulary would silently mask nothing.
  for (const auto& [key, id] : {std::pair<const char*, std::int32_t>{"eot_id", m.eot_id}, {"bos_id", m.bos_id},
                                {"eos_id", m.eos_id}, {"pad_id", m.pad_id}})
    MESHTRAIN_REQUIRE(id < m.vocab_size, "%s: %s = %d is outside the vocabulary (vocab_size %lld); re-run `meshtrain prepare`",
                      path.c_str(), key, id, static_cast<long long>(m.vocab_size));
  m.train_tokens = unsigned_member(root, "train_tokens", path);
  m.val_tokens = unsigned_member(root, "val_tokens", path);
  m.val_fraction = number(root, "val_fraction", path).get<double>();
  m.val_split = string_member(root, "val_split", path);
  m.bytes = unsigned_member(root, "bytes", path);
  m.train_entropy_bits = number(root, "train_entropy_bits", path).get<double>();
  m.meshtrain_version = string_member(root, "meshtrain_version", path);
  for (const Json& f : member(root, "source_files", Json::value_t::array, path)) {
    MESHTRAIN_REQUIRE(f.is_string(), "%s: \"source_files\" must be a list of strings", path.c_str());
    m.source_files.push_back(f.get<std::string>());
  }
  if (root.contains("row_tokens")) {
    const std::uint64_t r = unsigned_member(root, "row_tokens", path);
    MESHTRAIN_REQUIRE(r >= 2 && r <= (1u << 30), "%s: \"row_tokens\" must be in 2 .. 2^30, got %llu", path.c_str(),
                      static_cast<unsigned long long>(r));
    m.row_tokens = static_cast<std::uint32_t>(r);
    m.data_format = string_member(root, "data_format", path);
    MESHTRAIN_REQUIRE(m.data_format == "text" || m.data_format == "alpaca" || m.data_format == "chat" ||
                          m.data_format == "preference",
                      "%s: \"data_format\" is '%s'; a dataset of rows is text (packed), alpaca, chat or preference "
                      "(re-run `meshtrain prepare`)",
                      path.c_str(), m.data_format.c_str());
    m.chat_template = string_member(root, "chat_template", path);
    // Written since prepare records its system message; older datasets lack it.
    if (root.contains("chat_system")) m.chat_system = string_member(root, "chat_system", path);
    m.train_examples = unsigned_member(root, "train_examples", path);
    m.val_examples = unsigned_member(root, "val_examples", path);
    m.truncated_examples = unsigned_member(root, "truncated_examples", path);
    m.dropped_examples = unsigned_member(root, "dropped_examples", path);
    m.fill_fraction = number(root, "fill_fraction", path).get<double>();
    if (m.data_format == "preference") {
      // The pair layout is what a preference objective relies on: refused when it is not
      // the one this meshtrain writes, or the counts do not make whole pairs.
      const std::string layout = string_member(root, "row_layout", path);
      MESHTRAIN_REQUIRE(layout == kPreferenceRowLayout, "%s: \"row_layout\" is '%s'; a preference dataset's is '%s'",
                        path.c_str(), layout.c_str(), kPreferenceRowLayout);
      m.train_rows = unsigned_member(root, "train_rows", path);
      m.val_rows = unsigned_member(root, "val_rows", path);
      MESHTRAIN_REQUIRE(m.train_rows == 2 * m.train_examples && m.val_rows == 2 * m.val_examples && !root.contains("packed"),
                        "%s: a preference dataset holds two rows per pair, unpacked, but it says train_rows %llu for "
                        "%llu pairs and val_rows %llu for %llu%s; re-run `meshtrain prepare --format preference`",
                        path.c_str(), static_cast<unsigned long long>(m.train_rows),
                        static_cast<unsigned long long>(m.train_examples), static_cast<unsigned long long>(m.val_rows),
                        static_cast<unsigned long long>(m.val_examples), root.contains("packed") ? ", packed" : "");
    }
    if (root.contains("packed"))
      MESHTRAIN_REQUIRE(root["packed"].is_boolean(), "%s: \"packed\" must be true or false, got %s; re-run `meshtrain prepare`",
                        path.c_str(), root["packed"].dump().c_str());
    if (root.contains("packed") && root["packed"].get<bool>()) {
      m.packed = true;
      m.train_rows = unsigned_member(root, "train_rows", path);
      m.val_rows = unsigned_member(root, "val_rows", path);
      m.fill_fraction_unpacked = number(root, "fill_fraction_unpacked", path).get<double>();
    }
  }
  return m;
}

}  // namespace meshtrain::data
