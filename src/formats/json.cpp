#include "formats/json.hpp"

#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/format.hpp"

namespace meshtrain::formats {

std::string json_error_text(const nlohmann::json::exception& e) {
  const std::string what = e.what();
  const std::size_t close = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? what.substr(close + 2) : what;
}

Json parse_json(const std::string& text) {
  // The keys seen so far in each object being read, innermost last: a key read twice in one
  // object is an error (nlohmann would keep the last one silently).
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  int too_deep = 0;
  const Json::parser_callback_t check = [&](int depth, nlohmann::json::parse_event_t event, Json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxJsonDepth) {
      too_deep = depth + 1;
      throw std::runtime_error("");  // stops the parser; replaced by the message below
    }
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end) keys.pop_back();
    if (event == E::key && !keys.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
      throw std::runtime_error("");
    }
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(json_error_text(e));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(json_error_text(e));
  } catch (const std::runtime_error&) {
    if (!duplicate.empty()) throw std::runtime_error(strprintf("key '%s' appears twice in one object", duplicate.c_str()));
    if (too_deep) throw std::runtime_error(strprintf("nesting deeper than %d levels", kMaxJsonDepth));
    throw;
  }
}

bool json_uint(const Json& v, std::uint64_t& out) {
  if (!v.is_number_unsigned()) return false;
  out = v.get<std::uint64_t>();
  return true;
}

namespace {

/// `v` with every whole-valued double below 2^53 as an integer: the text %.17g gave them
/// (a step count or a byte total reads as 4096, not 4096.0), the same value to any reader.
Json whole_numbers_as_integers(const Json& v) {
  if (v.is_number_float()) {
    const double x = v.get<double>();
    const bool whole = std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9007199254740992.0;
    return whole ? Json(static_cast<std::int64_t>(x)) : v;
  }
  if (v.is_array()) {
    Json out = Json::array();
    for (const Json& e : v) out.push_back(whole_numbers_as_integers(e));
    return out;
  }
  if (v.is_object()) {
    Json out = Json::object();
    for (const auto& [k, e] : v.items()) out[k] = whole_numbers_as_integers(e);
    return out;
  }
  return v;
}

}  // namespace

std::string json_text(const Json& v) {
  return whole_numbers_as_integers(v).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string json_pretty(const Json& v) {
  return whole_numbers_as_integers(v).dump(2, ' ', false, Json::error_handler_t::replace);
}

}  // namespace meshtrain::formats
