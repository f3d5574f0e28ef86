#include "meshtrain/formats/json.hpp"

#include <set>
#include <stdexcept>
#include <vector>

#include "meshtrain/core/format.hpp"

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

std::string json_text(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string json_pretty(const Json& v) { return v.dump(2, ' ', false, Json::error_handler_t::replace); }

}  // namespace meshtrain::formats
