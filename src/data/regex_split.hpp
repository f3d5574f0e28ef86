#pragma once
// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) that lists the
// byte ranges of its matches in a UTF-8 string: what the tokenizers' Split pre-tokenizers
// need. Internal to the data module.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::data {

class Regex {
 public:
  /// UserError naming the pattern when it does not compile. `literal` matches the text as is.
  Regex(const std::string& pattern, bool literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  /// [begin, end) byte ranges of the non-overlapping, non-empty matches in `text`, in order.
  /// UserError when `text` is not valid UTF-8.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(const std::string& text) const;
  /// The same matches handed to `each(begin, end)` one at a time, as they are found: a long
  /// text's matches are not held together (find_all keeps 16 bytes per match).
  void for_each_match(const std::string& text, const std::function<void(std::size_t, std::size_t)>& each) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;
};

}  // namespace meshtrain::data
