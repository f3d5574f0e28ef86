#include "meshtrain/core/json.hpp"

#include <cmath>

#include "meshtrain/core/format.hpp"

namespace meshtrain {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += strprintf("\\u%04x", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void JsonObject::key(const std::string& k) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_quote(k) + ": ";
}

JsonObject& JsonObject::add(const std::string& k, double v) {
  key(k);
  // JSON has no NaN/Inf: write null so every reader accepts the line.
  body_ += std::isfinite(v) ? strprintf("%.17g", v) : "null";
  return *this;
}

JsonObject& JsonObject::add(const std::string& k, std::int64_t v) {
  key(k);
  body_ += std::to_string(v);
  return *this;
}

JsonObject& JsonObject::add(const std::string& k, bool v) {
  key(k);
  body_ += v ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::add(const std::string& k, const std::string& v) {
  key(k);
  body_ += json_quote(v);
  return *this;
}

JsonObject& JsonObject::add_raw(const std::string& k, const std::string& json) {
  key(k);
  body_ += json;
  return *this;
}

}  // namespace meshtrain
