#pragma once
/// \brief A small JSON reader (dataset meta.json, safetensors headers and index files).
/// Objects keep their members in document order, duplicates included, so callers can
/// reject duplicate keys; numbers keep their literal text. Writing JSON: core/json.hpp.

#include <string>
#include <utility>
#include <vector>

namespace meshtrain::json {

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // String: the decoded string; Number: the literal as written
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members;

  /// The member `key` of an object, or nullptr.
  const Value* find(const std::string& key) const;
};

/// Nesting deeper than this is rejected (bounds the parser's recursion on hostile input).
inline constexpr int kMaxJsonDepth = 128;

/// Parses one JSON document; throws std::runtime_error("... at byte N") when malformed
/// (including raw control characters inside strings and nesting beyond kMaxJsonDepth).
Value parse(const std::string& text);

}  // namespace meshtrain::json
