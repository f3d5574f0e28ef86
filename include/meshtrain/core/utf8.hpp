#pragma once
/// \brief UTF-8 helpers shared by the tokenizers and the JSON reader.
#include <cstddef>
#include <cstdint>
#include <string>

namespace meshtrain::utf8 {

/// Length of the UTF-8 sequence starting with byte `c` (1 for a stray continuation byte).
inline std::size_t char_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

/// Appends code point `cp` as UTF-8.
inline void append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Decodes the code point at s[i] (which has char_len bytes available); no validation.
inline std::uint32_t decode_at(const std::string& s, std::size_t i, std::size_t len) {
  const auto b = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[i + k])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

/// Offset of the first invalid UTF-8 sequence in `s`, or npos when it is all valid.
std::size_t first_invalid(const std::string& s);

/// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points above
/// U+10FFFF): the one validity check of the tree.
inline bool valid(const std::string& s) { return first_invalid(s) == std::string::npos; }

}  // namespace meshtrain::utf8
