#pragma once
// A small JSON reader and string quoting for meta.json. Private to src/data.

#include <string>
#include <utility>
#include <vector>

namespace meshtrain::data::json {

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

/// Parses one JSON document; throws std::runtime_error("... at byte N") when malformed.
Value parse(const std::string& text);

/// `s` as a JSON string literal, with quotes.
std::string quote(const std::string& s);

}  // namespace meshtrain::data::json
