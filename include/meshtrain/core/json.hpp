#pragma once
/// \brief A minimal JSON object writer for metrics lines and run records (numbers print
/// with round-trip precision, so equal losses print identically).

#include <cstdint>
#include <string>

namespace meshtrain {

class JsonObject {
 public:
  JsonObject& add(const std::string& key, double v);
  JsonObject& add(const std::string& key, std::int64_t v);
  JsonObject& add(const std::string& key, int v) { return add(key, static_cast<std::int64_t>(v)); }
  JsonObject& add(const std::string& key, std::uint64_t v) { return add(key, static_cast<std::int64_t>(v)); }
  JsonObject& add(const std::string& key, bool v);
  JsonObject& add(const std::string& key, const std::string& v);
  JsonObject& add(const std::string& key, const char* v) { return add(key, std::string(v)); }
  /// Inserts pre-serialised JSON (an object or array) under key.
  JsonObject& add_raw(const std::string& key, const std::string& json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};

/// Escapes a string for JSON (quotes included).
std::string json_quote(const std::string& s);

}  // namespace meshtrain
