#include "meshtrain/core/json_parse.hpp"

#include <stdexcept>

#include "meshtrain/core/utf8.hpp"

namespace meshtrain::json {
namespace {

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  Value document() {
    Value v = value();
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(what + " at byte " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(pos_, w.size(), w) != 0) return false;
    pos_ += w.size();
    return true;
  }

  Value value() {
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    if (++depth_ > kMaxJsonDepth) fail("nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    Value v;
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      v.kind = Value::Kind::Object;
      if (consume('}')) return v;
      do {
        skip_space();
        std::string key = string();
        expect(':');
        v.members.emplace_back(std::move(key), value());
      } while (consume(','));
      expect('}');
    } else if (c == '[') {
      ++pos_;
      v.kind = Value::Kind::Array;
      if (consume(']')) return v;
      do v.items.push_back(value());
      while (consume(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Value::Kind::String;
      v.text = string();
    } else if (literal("true")) {
      v.kind = Value::Kind::Bool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Value::Kind::Bool;
    } else if (literal("null")) {
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Value::Kind::Number;
      v.text = number();
    } else {
      fail("unexpected character");
    }
    return v;
  }

  /// RFC 8259's number: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?, kept as written.
  /// Strict, so that a reader's std::stoull never takes the prefix of "1-2" or "01".
  std::string number() {
    const std::size_t start = pos_;
    const auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    const auto digits = [&] {
      if (!digit()) fail("malformed number");
      while (digit()) ++pos_;
    };
    consume_char('-');
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
      if (digit()) fail("malformed number (a leading zero)");
    } else {
      digits();
    }
    if (consume_char('.')) digits();
    if (consume_char('e') || consume_char('E')) {
      if (!consume_char('+')) consume_char('-');
      digits();
    }
    return s_.substr(start, pos_ - start);
  }
  bool consume_char(char c) {  // no white space skipped (inside a token)
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  std::string string() {
    if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string");
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': utf8::append(out, code_point()); break;
        default: fail("bad escape");
      }
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }
  unsigned code_point() {
    unsigned cp = hex4();
    // A surrogate stands only in a high-low pair; alone it would become invalid UTF-8.
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF && s_.compare(pos_, 2, "\\u") != 0) fail("lone high surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF && s_.compare(pos_, 2, "\\u") == 0) {
      pos_ += 2;
      const unsigned lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) fail("bad surrogate pair");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return cp;
  }
  const std::string& s_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

const Value* Value::find(const std::string& key) const {
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

Value parse(const std::string& text) { return Parser(text).document(); }

}  // namespace meshtrain::json
