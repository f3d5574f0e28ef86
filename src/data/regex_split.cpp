#define PCRE2_CODE_UNIT_WIDTH 8
#include "regex_split.hpp"

#include <pcre2.h>

#include "core/error.hpp"
#include "core/utf8.hpp"

namespace meshtrain::data {

Regex::Regex(const std::string& pattern, bool literal) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  // PCRE2_LITERAL admits no PCRE2_UCP (pcre2_compile refuses the pair): a literal has no
  // character classes for UCP to change.
  const std::uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err,
                                   &err_off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw UserError(strprintf("the tokenizer's pattern '%s' does not compile (%s at offset %zu)", pattern.c_str(),
                              reinterpret_cast<const char*>(msg), static_cast<std::size_t>(err_off)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // an optimisation only: ignore failure
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(const std::string& text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for_each_match(text, [&](std::size_t b, std::size_t e) { out.emplace_back(b, e); });
  return out;
}

void Regex::for_each_match(const std::string& text, const std::function<void(std::size_t, std::size_t)>& each) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  std::size_t pos = 0;
  std::uint32_t options = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, options, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
        throw UserError(strprintf("the text is not valid UTF-8 (first bad byte at offset %zu); tokenizers read "
                                  "UTF-8 text only",
                                  utf8::first_invalid(text)));
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw UserError(strprintf("matching the tokenizer's pattern '%s' failed: %s", pattern_.c_str(),
                                reinterpret_cast<const char*>(msg)));
    }
    options = PCRE2_NO_UTF_CHECK;  // checked once on the first call
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t b = ov[0], e = ov[1];
    if (e > b) {
      try {
        each(b, e);
      } catch (...) {
        pcre2_match_data_free(md);
        throw;
      }
      pos = e;
    } else {  // empty match: step over one character
      if (b >= text.size()) break;
      pos = b + utf8::char_len(static_cast<unsigned char>(text[b]));
    }
  }
  pcre2_match_data_free(md);
}

}  // namespace meshtrain::data
