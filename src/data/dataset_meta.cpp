// meta.json: written by prepare, read by Dataset::open.
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "meshtrain/core/checked_int.hpp"
#include "meshtrain/core/error.hpp"
#include "meshtrain/core/json.hpp"
#include "meshtrain/core/json_parse.hpp"
#include "meshtrain/data/dataset.hpp"

namespace meshtrain::data {
namespace {

const json::Value& member(const json::Value& obj, const char* key, json::Value::Kind kind,
                          const std::string& path) {
  const json::Value* v = obj.find(key);
  MESHTRAIN_REQUIRE(v != nullptr && v->kind == kind,
                    "%s has no valid \"%s\" entry; re-run `meshtrain prepare` to rewrite the dataset",
                    path.c_str(), key);
  return *v;
}

std::uint64_t unsigned_member(const json::Value& obj, const char* key, const std::string& path) {
  const std::string& t = member(obj, key, json::Value::Kind::Number, path).text;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  MESHTRAIN_REQUIRE(!t.empty() && t[0] != '-' && *end == '\0' && errno == 0,
                    "%s: \"%s\" must be a non-negative integer, got %s", path.c_str(), key, t.c_str());
  return v;
}

std::int64_t signed_member(const json::Value& obj, const char* key, const std::string& path) {
  const std::string& t = member(obj, key, json::Value::Kind::Number, path).text;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  MESHTRAIN_REQUIRE(!t.empty() && *end == '\0' && errno == 0, "%s: \"%s\" must be an integer, got %s",
                    path.c_str(), key, t.c_str());
  return v;
}

/// A special-token id: -1 (none) or an id an int32 holds; a wider one would wrap.
std::int32_t id_member(const json::Value& obj, const char* key, const std::string& path) {
  return checked_int<std::int32_t>(signed_member(obj, key, path), path, key, -1,
                                   std::numeric_limits<std::int32_t>::max());
}

double number_member(const json::Value& obj, const char* key, const std::string& path) {
  return std::strtod(member(obj, key, json::Value::Kind::Number, path).text.c_str(), nullptr);
}

// The shortest of %.15g / %.17g that reads back as the same double (0.05, not 0.050000000000000003).
std::string number_text(double v) {
  const std::string short_form = strprintf("%.15g", v);
  return std::strtod(short_form.c_str(), nullptr) == v ? short_form : strprintf("%.17g", v);
}

}  // namespace

std::string meta_to_json(const DatasetMeta& m) {
  std::string files;
  for (std::size_t i = 0; i < m.source_files.size(); ++i)
    files += strprintf("%s\n    %s", i ? "," : "", json_quote(m.source_files[i]).c_str());
  // Keys of instruction/chat datasets only: a text dataset's meta.json is as it always was.
  std::string rows;
  if (m.row_tokens > 0)
    rows = strprintf("  \"data_format\": %s,\n  \"seq_len\": %u,\n  \"row_tokens\": %u,\n  \"chat_template\": %s,\n"
                     "  \"train_examples\": %llu,\n  \"val_examples\": %llu,\n  \"truncated_examples\": %llu,\n"
                     "  \"dropped_examples\": %llu,\n  \"fill_fraction\": %s,\n",
                     json_quote(m.data_format).c_str(), m.row_tokens - 1, m.row_tokens,
                     json_quote(m.chat_template).c_str(), static_cast<unsigned long long>(m.train_examples),
                     static_cast<unsigned long long>(m.val_examples),
                     static_cast<unsigned long long>(m.truncated_examples),
                     static_cast<unsigned long long>(m.dropped_examples), number_text(m.fill_fraction).c_str());
  // Packed rows (prepare --pack): several examples a row, train.docs/val.docs beside.
  if (m.packed)
    rows += strprintf("  \"packed\": true,\n  \"train_rows\": %llu,\n  \"val_rows\": %llu,\n  \"fill_fraction_unpacked\": %s,\n",
                      static_cast<unsigned long long>(m.train_rows), static_cast<unsigned long long>(m.val_rows),
                      number_text(m.fill_fraction_unpacked).c_str());
  return strprintf(
      "{\n"
      "  \"format\": \"meshtrain-dataset\",\n"
      "  \"tokenizer\": %s,\n"
      "  \"tokenizer_kind\": %s,\n"
      "  \"tokenizer_hash\": %s,\n"
      "  \"vocab_size\": %lld,\n"
      "  \"eot_id\": %d,\n"
      "  \"bos_id\": %d,\n"
      "  \"eos_id\": %d,\n"
      "  \"pad_id\": %d,\n"
      "  \"add_bos\": %s,\n"
      "  \"train_tokens\": %llu,\n"
      "  \"val_tokens\": %llu,\n"
      "  \"val_fraction\": %s,\n"
      "  \"val_split\": %s,\n"
      "  \"bytes\": %llu,\n"
      "  \"train_entropy_bits\": %s,\n"
      "  \"meshtrain_version\": %s,\n%s"
      "  \"source_files\": [%s%s]\n"
      "}\n",
      json_quote(m.tokenizer).c_str(), json_quote(m.tokenizer_kind).c_str(), json_quote(m.tokenizer_hash).c_str(),
      static_cast<long long>(m.vocab_size), m.eot_id, m.bos_id, m.eos_id, m.pad_id, m.add_bos ? "true" : "false",
      static_cast<unsigned long long>(m.train_tokens), static_cast<unsigned long long>(m.val_tokens),
      number_text(m.val_fraction).c_str(), json_quote(m.val_split).c_str(),
      static_cast<unsigned long long>(m.bytes), number_text(m.train_entropy_bits).c_str(),
      json_quote(m.meshtrain_version).c_str(), rows.c_str(), files.c_str(),
      files.empty() ? "" : "\n  ");
}

DatasetMeta meta_from_json(const std::string& text, const std::string& path) {
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const std::runtime_error& e) {
    throw UserError(strprintf("%s is not valid JSON (%s); re-run `meshtrain prepare`", path.c_str(), e.what()));
  }
  MESHTRAIN_REQUIRE(root.kind == json::Value::Kind::Object, "%s must hold a JSON object", path.c_str());
  using K = json::Value::Kind;
  DatasetMeta m;
  m.tokenizer = member(root, "tokenizer", K::String, path).text;
  m.vocab_size = signed_member(root, "vocab_size", path);
  m.eot_id = id_member(root, "eot_id", path);
  // Written since tokenizers other than byte exist; older datasets lack them.
  if (const json::Value* v = root.find("tokenizer_kind"); v && v->kind == K::String) m.tokenizer_kind = v->text;
  else if (m.tokenizer == "byte") m.tokenizer_kind = "byte";
  if (const json::Value* v = root.find("tokenizer_hash"); v && v->kind == K::String) m.tokenizer_hash = v->text;
  if (root.find("bos_id")) m.bos_id = id_member(root, "bos_id", path);
  if (root.find("eos_id")) m.eos_id = id_member(root, "eos_id", path);
  if (root.find("pad_id")) m.pad_id = id_member(root, "pad_id", path);
  if (const json::Value* v = root.find("add_bos")) m.add_bos = v->kind == K::Bool && v->boolean;
  m.train_tokens = unsigned_member(root, "train_tokens", path);
  m.val_tokens = unsigned_member(root, "val_tokens", path);
  m.val_fraction = number_member(root, "val_fraction", path);
  m.val_split = member(root, "val_split", K::String, path).text;
  m.bytes = unsigned_member(root, "bytes", path);
  m.train_entropy_bits = number_member(root, "train_entropy_bits", path);
  m.meshtrain_version = member(root, "meshtrain_version", K::String, path).text;
  for (const json::Value& f : member(root, "source_files", K::Array, path).items) {
    MESHTRAIN_REQUIRE(f.kind == K::String, "%s: \"source_files\" must be a list of strings", path.c_str());
    m.source_files.push_back(f.text);
  }
  if (root.find("row_tokens")) {
    const std::uint64_t r = unsigned_member(root, "row_tokens", path);
    MESHTRAIN_REQUIRE(r >= 2 && r <= (1u << 30), "%s: \"row_tokens\" must be in 2 .. 2^30, got %llu", path.c_str(),
                      static_cast<unsigned long long>(r));
    m.row_tokens = static_cast<std::uint32_t>(r);
    m.data_format = member(root, "data_format", K::String, path).text;
    m.chat_template = member(root, "chat_template", K::String, path).text;
    m.train_examples = unsigned_member(root, "train_examples", path);
    m.val_examples = unsigned_member(root, "val_examples", path);
    m.truncated_examples = unsigned_member(root, "truncated_examples", path);
    m.dropped_examples = unsigned_member(root, "dropped_examples", path);
    m.fill_fraction = number_member(root, "fill_fraction", path);
    if (const json::Value* v = root.find("packed"); v && v->kind == K::Bool && v->boolean) {
      m.packed = true;
      m.train_rows = unsigned_member(root, "train_rows", path);
      m.val_rows = unsigned_member(root, "val_rows", path);
      m.fill_fraction_unpacked = number_member(root, "fill_fraction_unpacked", path);
    }
  }
  return m;
}

}  // namespace meshtrain::data
