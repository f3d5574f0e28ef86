#pragma once
/// \file
/// \brief Range-checked conversion of the integers a file supplies (GGUF metadata,
/// config.json, tokenizer.json, meta.json, token-id lists). A value is converted to a
/// narrower type only through these helpers, so a value that does not fit (2^32 + 2 layers,
/// an id of 1.5) is a UserError naming the file, the key and the value as written, never a
/// silent wrap or truncation into a run that starts with the wrong shape.

#include <cstdint>
#include <limits>
#include <string>

#include "core/error.hpp"

namespace meshtrain {

/// UserError "FILE: KEY = VALUE is outside LO..HI" (and `why` when given: what the bound is).
[[noreturn]] void throw_int_out_of_range(const std::string& file, const std::string& key, const std::string& value,
                                         long long lo, long long hi, const char* why = nullptr);

/// `value`, which `file` gives for `key`, as T when lo <= value <= hi (by default T's range).
template <class T>
T checked_int(long long value, const std::string& file, const std::string& key,
              long long lo = static_cast<long long>(std::numeric_limits<T>::min()),
              long long hi = static_cast<long long>(std::numeric_limits<T>::max()), const char* why = nullptr) {
  // T's whole range must be a long long range: an unsigned 64-bit T would turn its maximum
  // into -1 and refuse every value.
  static_assert(std::numeric_limits<T>::is_integer &&
                    (sizeof(T) < sizeof(long long) || std::numeric_limits<T>::is_signed),
                "checked_int: a signed type, or an unsigned one narrower than long long");
  if (value < lo || value > hi) throw_int_out_of_range(file, key, std::to_string(value), lo, hi, why);
  return static_cast<T>(value);
}

/// The integer written as `text` (a JSON number literal or a config value: "576", "576.0",
/// "1e3"), range-checked as checked_int does. A fraction ("1.5"), a literal beyond 64 bits
/// or no number at all is a UserError naming the file, the key and the text.
long long parse_checked_int(const std::string& text, const std::string& file, const std::string& key,
                            long long lo = std::numeric_limits<long long>::min(),
                            long long hi = std::numeric_limits<long long>::max(), const char* why = nullptr);

}  // namespace meshtrain
