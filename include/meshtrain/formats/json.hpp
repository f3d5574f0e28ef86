#pragma once
/// \brief JSON, read and written with one library (nlohmann/json). Documents keep their
/// members in file order (`ordered_json`), so what meshtrain writes lists its keys in the
/// order the code adds them and what it reads can be walked in file order.
///
/// Writing: build an `ordered_json` and write it with json_text or json_pretty -- numbers as
/// the shortest text that reads back to the same double, a whole-valued double as an
/// integer (4096, as printf's %.17g wrote it, not 4096.0), a NaN or an infinity as null
/// (JSON has neither), strings escaped.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace meshtrain::formats {

using Json = nlohmann::ordered_json;

/// Nesting deeper than this is rejected (bounds the work on hostile input).
inline constexpr int kMaxJsonDepth = 128;

/// \brief Parses one JSON document strictly: std::runtime_error saying what is wrong and
/// where (nlohmann's "parse error at line L, column C: ...") when it is malformed (raw control characters inside strings included), when an object
/// holds a key twice ("key 'K' appears twice") or when it nests deeper than kMaxJsonDepth.
/// Callers add the file's name.
Json parse_json(const std::string& text);

/// nlohmann's exception text without its "[json.exception.parse_error.101] " prefix.
std::string json_error_text(const nlohmann::json::exception& e);

/// `v` as a non-negative integer: true when it is a JSON integer >= 0 (within 64 bits).
bool json_uint(const Json& v, std::uint64_t& out);

/// The compact text of `v` (one line, no spaces; invalid UTF-8 in a string is replaced by
/// U+FFFD), for records read by programs (metrics.jsonl, run.json, summary.json, headers).
std::string json_text(const Json& v);

/// The same indented by two spaces, one member a line, for files people read too
/// (meta.json, bench results).
std::string json_pretty(const Json& v);

}  // namespace meshtrain::formats
