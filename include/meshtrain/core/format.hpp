#pragma once
/// \file
/// \brief printf-style formatting into std::string, and small string helpers.

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

/// printf into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(double bytes);

/// Joins with a separator: join({"a","b"}, ", ") == "a, b".
std::string join(const std::vector<std::string>& parts, const std::string& sep);

/// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(const std::string& a, const std::string& b);

/// "(2, 3, 4)" from a shape.
std::string shape_string(const std::vector<std::int64_t>& shape);

/// A file time (nanoseconds since the Unix epoch) as people read it, in UTC:
/// "2026-12-01 20:57:01.123456789 UTC" (the nanoseconds kept: two times that differ only
/// there must not print alike).
std::string utc_time_text(std::int64_t ns_since_epoch);

}  // namespace meshtrain
