// Range-checked integers from files (see checked_int.hpp).
#include "core/checked_int.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace meshtrain {

void throw_int_out_of_range(const std::string& file, const std::string& key, const std::string& value, long long lo,
                            long long hi, const char* why) {
  throw UserError(strprintf("%s: %s = %s is outside %lld..%lld%s%s", file.c_str(), key.c_str(), value.c_str(), lo, hi,
                            why ? " " : "", why ? why : ""));
}

long long parse_checked_int(const std::string& text, const std::string& file, const std::string& key, long long lo,
                            long long hi, const char* why) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (!text.empty() && *end == '\0') {
    if (errno == ERANGE) throw_int_out_of_range(file, key, text, lo, hi, why);
    return checked_int<long long>(v, file, key, lo, hi, why);
  }
  // "576.0" or "1e3": a whole number written as a float is that integer; a fraction is not.
  errno = 0;
  const double d = std::strtod(s, &end);
  MESHTRAIN_REQUIRE(!text.empty() && *end == '\0' && std::isfinite(d) && d == std::floor(d),
                    "%s: %s = %s is not an integer", file.c_str(), key.c_str(), text.c_str());
  // Beyond +-2^63 the double has no long long; beyond 2^53 it is no longer exact either.
  if (!(std::fabs(d) <= 9007199254740992.0)) throw_int_out_of_range(file, key, text, lo, hi, why);
  const auto i = static_cast<long long>(d);
  if (i < lo || i > hi) throw_int_out_of_range(file, key, text, lo, hi, why);
  return i;
}

}  // namespace meshtrain
